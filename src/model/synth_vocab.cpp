// The vocabulary every synthetic model carries: a real, usable byte-level BPE (llama.cpp "gpt2"
// model), so text tokenizes and the README demo works with no file beside the binary.
//
// Ids 0-255 are GPT-2's 256 byte symbols (type 1 NORMAL: type 6 BYTE would make llama.cpp expect
// <0xNN> names), 256-973 the results of the first 718 Qwen merges (so they are the real Qwen ids),
// 974-999 Qwen's 26 added tokens (<|endoftext|> = bos = padding, <|im_end|> = eos), then [PADn]
// (type 5 UNUSED) up to the model's vocabulary size. At 1024 tokens this is exactly
// tests/golden/tokenizer/qwen35-tiny-vocab.gguf (test_synth checks it token for token).
#include <cstdint>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "model/synth.h"

namespace df::model::synth {
namespace {

// The first 718 merges of the Qwen2/Qwen3 byte-level BPE (Apache-2.0), one "A B" per line, in rank
// order; merge i yields token 256 + i. Same data as tests/golden/tokenizer/qwen35-tiny-vocab.gguf.
inline constexpr std::string_view kMerges = R"merges(Ġ Ġ
ĠĠ ĠĠ
i n
Ġ t
ĠĠĠĠ ĠĠĠĠ
e r
ĠĠ Ġ
o n
Ġ a
r e
a t
s t
e n
o r
Ġt h
Ċ Ċ
Ġ c
l e
Ġ s
i t
a n
a r
a l
Ġth e
; Ċ
Ġ p
Ġ f
o u
Ġ =
i s
ĠĠĠĠ ĠĠĠ
in g
e s
Ġ w
i on
e d
i c
Ġ b
Ġ d
e t
Ġ m
Ġ o
ĉ ĉ
r o
a s
e l
c t
n d
Ġ in
Ġ h
en t
i d
Ġ n
a m
ĠĠĠĠĠĠĠĠ ĠĠĠ
Ġt o
Ġ re
- -
Ġ {
Ġo f
o m
) ;Ċ
i m
č Ċ
Ġ (
i l
/ /
Ġa nd
u r
s e
Ġ l
e x
Ġ S
a d
Ġ "
c h
u t
i f
* *
Ġ }
e m
o l
ĠĠĠĠĠĠĠĠ ĠĠĠĠĠĠĠĠ
t h
) Ċ
Ġ{ Ċ
Ġ g
i g
i v
, Ċ
c e
o d
Ġ v
at e
Ġ T
a g
a y
Ġ *
o t
u s
Ġ C
Ġ st
Ġ I
u n
u l
u e
Ġ A
o w
Ġ '
e w
Ġ <
at ion
( )
Ġf or
a b
or t
u m
am e
Ġ is
p e
t r
c k
â Ģ
Ġ y
i st
-- --
. ĊĊ
h e
Ġ e
l o
Ġ M
Ġb e
er s
Ġ on
Ġc on
a p
u b
Ġ P
ĠĠĠĠĠĠĠĠ ĠĠĠĠĠĠĠ
as s
in t
> Ċ
l y
ur n
Ġ $
; ĊĊ
a v
p ort
i r
- >
n t
ct ion
en d
Ġd e
it h
ou t
t urn
ou r
ĠĠĠĠ Ġ
l ic
re s
p t
= =
Ġth is
Ġw h
Ġ if
Ġ D
v er
ag e
Ġ B
h t
ex t
= "
Ġth at
** **
Ġ R
Ġ it
es s
Ġ F
Ġ r
o s
an d
Ġa s
e ct
k e
ro m
Ġ //
c on
Ġ L
( "
q u
l ass
Ġw ith
i z
d e
Ġ N
Ġa l
o p
u p
g et
Ġ} Ċ
i le
Ġa n
at a
o re
r i
Ġp ro
; čĊ
ĉĉ ĉĉ
t er
a in
Ġ W
Ġ E
Ġc om
Ġre turn
ar t
Ġ H
a ck
im port
ub lic
Ġ or
e st
m ent
Ġ G
ab le
Ġ -
in e
il l
in d
er e
: :
it y
Ġ +
Ġt r
el f
ig ht
( '
or m
ul t
st r
. .
" ,
Ġy ou
y pe
p l
Ġn ew
Ġ j
ĠĠĠĠĠĠĠĠ ĠĠĠĠĠĠĠĠĠĠĠ
Ġf rom
Ġ ex
Ġ O
l d
Ġ [
o c
: Ċ
Ġs e
Ġ le
---- ----
. s
{ Ċ
' ,
an t
Ġa t
as e
. c
Ġc h
< /
av e
an g
Ġa re
Ġin t
âĢ Ļ
_ t
er t
i al
a ct
} Ċ
iv e
od e
o st
Ġc lass
Ġn ot
o g
or d
al ue
al l
f f
( );Ċ
on t
im e
a re
Ġ U
Ġp r
Ġ :
i es
iz e
u re
Ġb y
i re
Ġ} ĊĊ
. p
Ġs h
ic e
a st
pt ion
tr ing
o k
_ _
c l
# #
Ġh e
ar d
) .
Ġ @
i ew
ĉĉ ĉ
Ġw as
i p
th is
Ġ u
ĠT he
id e
a ce
i b
a c
r ou
Ġw e
j ect
Ġp ublic
a k
v e
at h
o id
Ġ= >
u st
q ue
Ġre s
) )
' s
Ġ k
an s
y st
un ction
**** ****
Ġ i
Ġ us
p p
on e
a il
== ==
n ame
Ġst r
Ġ /
Ġ &
a ch
d iv
yst em
el l
Ġh ave
er r
ou ld
ul l
p on
Ġ J
_ p
Ġ= =
ig n
S t
. Ċ
Ġp l
) ;ĊĊ
f orm
p ut
ou nt
} ĊĊ
d d
it e
Ġg et
r r
om e
Ġ âĢ
ar am
c c
Ġ* /
E R
I n
le s
_ s
on g
i e
Ġc an
Ġ V
er v
p r
Ġ un
ro w
b er
Ġd o
l l
Ġ el
Ġs elf
at ed
ar y
Ġ .
' ]
u d
Ġ en
ĠT h
ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ ĠĠĠĠĠĠĠ
t e
_ c
u ct
Ġa b
or k
. get
Ġ #
a w
res s
o b
N ame
ap p
[ '
Ġal l
or y
it ion
an ce
e ar
Ġcon t
v ent
i a
Ġw ill
I N
ĠĠĠĠĠĠĠĠ Ġ
re turn
Ġ< /
d ata
) ĊĊ
R e
p le
il d
th er
Ġy our
" Ċ
( $
Ġ out
) ,
Ġh as
S tring
s o
Ġ up
a x
Ġde f
Ġb o
g e
al se
O N
p er
ic h
Ġb ut
Ġ Ċ
Ġ _
_ m
ad d
que st
od el
s elf
er y
f t
en s
// //
a ke
. C
Ġg o
Ġf unction
Ġ K
iv ate
Ġ im
Ġcon st
. t
Ġ*/ Ċ
) ;čĊ
Ġv oid
Ġs et
ĠS ystem
c ri
( )Ċ
l i
ĉ if
. m
al ly
s et
e p
âĢĻ s
b o
de f
' ,Ċ
Ġm e
Ġ !
at ch
" >
" ,Ċ
e c
ĠI n
p h
Ġ |
_ f
Ġv ar
en ce
I d
re e
in k
le ct
u g
et h
Ġel se
-------- --------
con t
Ġs o
at ic
Ġl o
p ro
t on
s s
ow n
ab el
o int
ou s
el d
S T
T he
ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ ĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠĠ
R E
" :
ol or
t p
e g
ke y
u de
ĠS t
ou nd
Ġa r
" );Ċ
en er
s er
b ject
ess age
f er
Ġm ore
ation s
ent s
Ġh is
Ġthe y
. S
Ġ Y
u se
n e
is h
ol d
_ d
i o
i eld
Ġp er
C ont
ing s
## ##
Ġd ata
Ġs a
e f
f o
Ġon e
en g
Ġd is
A T
Ġn ame
Ġtr ue
v al
le d
. f
Ġn e
Ġ end
. T
c re
ar k
lo g
E x
err or
_ id
ur re
ang e
Ġn ull
rr ay
Ġm y
p an
ic t
at or
V iew
L ist
ĉ return
âĢ Ŀ
Ġp re
Ġ x
cl ude
ar g
o v
. h
Ġ >
Ġthe ir
' )
ir st
ic k
g h
L E
O R
Ġpr ivate
t em
čĊ čĊ
us er
Ġ )
c om
. A
" ;Ċ
Ġ id
re ad
Ġwh o
_ b
" >Ċ
Ġt ime
Ġm an
r y
==== ====
rou p
ro p
p ublic
v el
um ber
b le
Ġwh ich
******** ********
Ġan y
Ġf alse
w e
Ġv alue
Ġl i
" )
nd er
g r
Ġn o
p aram
f ig
.c om
Ġa pp
_ l
ion s
. D
ĠC h
Ġab out
Ġa dd
Ġs u
Ġstr ing
I D
Ġo ver
str ing
. l
our ce
_ C
] Ċ
Ġ qu
ĠS tring
c a
S E
Ġ ro
s h
u al
T ype
s on
n ew
er n
Ġa g
A R
] ;Ċ
] .
Ġ ?
ic al
Ġd es
ut h
i x
ay s
Ġt ype
' t
a ult
Ġin ter
v ar
. b
Ġp art
. d
urre nt
I T
E N
en c
( f
r a
v alue
ch o
ut ton
o se
Ġ! =
at er
Ã ©
re ate
ol l
p os
y le
n g
A L
us ing
am es
Ġ{ čĊ
at es)merges";

// Qwen's 26 added tokens in id order, with their GGUF token types (3 control, 4 user-defined).
inline constexpr std::pair<std::string_view, int32_t> kAddedTokens[] = {
    {"<|endoftext|>", 3},
    {"<|im_start|>", 3},
    {"<|im_end|>", 3},
    {"<|object_ref_start|>", 3},
    {"<|object_ref_end|>", 3},
    {"<|box_start|>", 3},
    {"<|box_end|>", 3},
    {"<|quad_start|>", 3},
    {"<|quad_end|>", 3},
    {"<|vision_start|>", 3},
    {"<|vision_end|>", 3},
    {"<|vision_pad|>", 3},
    {"<|image_pad|>", 3},
    {"<|video_pad|>", 3},
    {"<tool_call>", 4},
    {"</tool_call>", 4},
    {"<|fim_prefix|>", 3},
    {"<|fim_middle|>", 3},
    {"<|fim_suffix|>", 3},
    {"<|fim_pad|>", 3},
    {"<|repo_name|>", 3},
    {"<|file_sep|>", 3},
    {"<tool_response>", 4},
    {"</tool_response>", 4},
    {"<think>", 4},
    {"</think>", 4},
};

// The Qwen3 chat template (tools, <think> handling), as in the tiny vocab file.
inline constexpr std::string_view kChatTemplate = R"tmpl({%- if tools %}
    {{- '<|im_start|>system\n' }}
    {%- if messages[0].role == 'system' %}
        {{- messages[0].content + '\n\n' }}
    {%- endif %}
    {{- "# Tools\n\nYou may call one or more functions to assist with the user query.\n\nYou are provided with function signatures within <tools></tools> XML tags:\n<tools>" }}
    {%- for tool in tools %}
        {{- "\n" }}
        {{- tool | tojson }}
    {%- endfor %}
    {{- "\n</tools>\n\nFor each function call, return a json object with function name and arguments within <tool_call></tool_call> XML tags:\n<tool_call>\n{\"name\": <function-name>, \"arguments\": <args-json-object>}\n</tool_call><|im_end|>\n" }}
{%- else %}
    {%- if messages[0].role == 'system' %}
        {{- '<|im_start|>system\n' + messages[0].content + '<|im_end|>\n' }}
    {%- endif %}
{%- endif %}
{%- set ns = namespace(multi_step_tool=true, last_query_index=messages|length - 1) %}
{%- for message in messages[::-1] %}
    {%- set index = (messages|length - 1) - loop.index0 %}
    {%- if ns.multi_step_tool and message.role == "user" and not(message.content.startswith('<tool_response>') and message.content.endswith('</tool_response>')) %}
        {%- set ns.multi_step_tool = false %}
        {%- set ns.last_query_index = index %}
    {%- endif %}
{%- endfor %}
{%- for message in messages %}
    {%- if (message.role == "user") or (message.role == "system" and not loop.first) %}
        {{- '<|im_start|>' + message.role + '\n' + message.content + '<|im_end|>' + '\n' }}
    {%- elif message.role == "assistant" %}
        {%- set content = message.content %}
        {%- set reasoning_content = '' %}
        {%- if message.reasoning_content is defined and message.reasoning_content is not none %}
            {%- set reasoning_content = message.reasoning_content %}
        {%- else %}
            {%- if '</think>' in message.content %}
                {%- set content = message.content.split('</think>')[-1].lstrip('\n') %}
                {%- set reasoning_content = message.content.split('</think>')[0].rstrip('\n').split('<think>')[-1].lstrip('\n') %}
            {%- endif %}
        {%- endif %}
        {%- if loop.index0 > ns.last_query_index %}
            {%- if loop.last or (not loop.last and reasoning_content) %}
                {{- '<|im_start|>' + message.role + '\n<think>\n' + reasoning_content.strip('\n') + '\n</think>\n\n' + content.lstrip('\n') }}
            {%- else %}
                {{- '<|im_start|>' + message.role + '\n' + content }}
            {%- endif %}
        {%- else %}
            {{- '<|im_start|>' + message.role + '\n' + content }}
        {%- endif %}
        {%- if message.tool_calls %}
            {%- for tool_call in message.tool_calls %}
                {%- if (loop.first and content) or (not loop.first) %}
                    {{- '\n' }}
                {%- endif %}
                {%- if tool_call.function %}
                    {%- set tool_call = tool_call.function %}
                {%- endif %}
                {{- '<tool_call>\n{"name": "' }}
                {{- tool_call.name }}
                {{- '", "arguments": ' }}
                {%- if tool_call.arguments is string %}
                    {{- tool_call.arguments }}
                {%- else %}
                    {{- tool_call.arguments | tojson }}
                {%- endif %}
                {{- '}\n</tool_call>' }}
            {%- endfor %}
        {%- endif %}
        {{- '<|im_end|>\n' }}
    {%- elif message.role == "tool" %}
        {%- if loop.first or (messages[loop.index0 - 1].role != "tool") %}
            {{- '<|im_start|>user' }}
        {%- endif %}
        {{- '\n<tool_response>\n' }}
        {{- message.content }}
        {{- '\n</tool_response>' }}
        {%- if loop.last or (messages[loop.index0 + 1].role != "tool") %}
            {{- '<|im_end|>\n' }}
        {%- endif %}
    {%- endif %}
{%- endfor %}
{%- if add_generation_prompt %}
    {{- '<|im_start|>assistant\n' }}
    {%- if enable_thinking is defined and enable_thinking is false %}
        {{- '<think>\n\n</think>\n\n' }}
    {%- endif %}
{%- endif %})tmpl";

constexpr int32_t kType_normal = 1, kType_unused = 5;
constexpr int32_t kFirstAdded = 256 + 718;  // 974

void append_utf8(std::string& s, uint32_t cp) {
    if (cp < 0x80) {
        s += static_cast<char>(cp);
    } else {  // the byte symbols stay below U+0800
        s += static_cast<char>(0xC0 | (cp >> 6));
        s += static_cast<char>(0x80 | (cp & 0x3F));
    }
}

// GPT-2's bytes_to_unicode in vocabulary order: the printable bytes map to themselves and come
// first, the other 68 map to U+0100 upward in byte order.
std::vector<std::string> byte_symbols() {
    auto printable = [](int b) { return (b >= '!' && b <= '~') || (b >= 0xA1 && b <= 0xAC) || (b >= 0xAE && b <= 0xFF); };
    std::vector<std::string> out;
    for (int b = 0; b < 256; ++b)
        if (printable(b)) append_utf8(out.emplace_back(), static_cast<uint32_t>(b));
    uint32_t next = 256;
    for (int b = 0; b < 256; ++b)
        if (!printable(b)) append_utf8(out.emplace_back(), next++);
    return out;
}

}  // namespace

std::vector<gguf::KeyValue> vocab_kv(int n_vocab, std::string_view pre) {
    constexpr int n_added = static_cast<int>(std::size(kAddedTokens));
    if (n_vocab < kFirstAdded + n_added)
        throw std::invalid_argument("synth: vocabulary of " + std::to_string(n_vocab) + " tokens is below the " +
                                    std::to_string(kFirstAdded + n_added) + " the built-in BPE needs");
    std::vector<std::string> tokens = byte_symbols();
    std::vector<int32_t> types(tokens.size(), kType_normal);
    std::vector<std::string> merges;
    for (size_t pos = 0; pos < kMerges.size();) {
        size_t end = kMerges.find('\n', pos);
        if (end == std::string_view::npos) end = kMerges.size();
        const std::string_view m = kMerges.substr(pos, end - pos);
        std::string tok(m);
        tok.erase(tok.find(' '), 1);
        merges.emplace_back(m);
        tokens.push_back(std::move(tok));
        types.push_back(kType_normal);
        pos = end + 1;
    }
    for (const auto& [text, type] : kAddedTokens) {
        tokens.emplace_back(text);
        types.push_back(type);
    }
    for (int id = static_cast<int>(tokens.size()); id < n_vocab; ++id) {
        tokens.push_back("[PAD" + std::to_string(id) + "]");
        types.push_back(kType_unused);
    }
    const auto id = [](std::string_view name) {
        for (int i = 0; i < static_cast<int>(std::size(kAddedTokens)); ++i)
            if (kAddedTokens[i].first == name) return static_cast<uint32_t>(kFirstAdded + i);
        throw std::logic_error("synth vocab: no added token " + std::string(name));
    };
    using gguf::Value;
    return {
        {"tokenizer.ggml.model", Value::str("gpt2")},
        {"tokenizer.ggml.pre", Value::str(std::string(pre))},
        {"tokenizer.ggml.tokens", Value::strings(tokens)},
        {"tokenizer.ggml.token_type", Value::i32s(types)},
        {"tokenizer.ggml.merges", Value::strings(merges)},
        {"tokenizer.ggml.bos_token_id", Value::u32(id("<|endoftext|>"))},
        {"tokenizer.ggml.eos_token_id", Value::u32(id("<|im_end|>"))},
        {"tokenizer.ggml.padding_token_id", Value::u32(id("<|endoftext|>"))},
        {"tokenizer.ggml.add_bos_token", Value::boolean(false)},
        {"tokenizer.chat_template", Value::str(std::string(kChatTemplate))},
    };
}

}  // namespace df::model::synth
