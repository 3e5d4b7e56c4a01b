// Generated tokens to the text a user sees: whole UTF-8 characters, the reasoning split from the
// answer at <think>/</think>, and stop strings cut out (text that may begin one is held back).
#pragma once

#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "diskformer/generate.h"
#include "tokenizer/tokenizer.h"

namespace diskformer {

class TextStream {
public:
    // tok must outlive the stream. start: the part the first token belongs to.
    TextStream(const df::tokenizer::Tokenizer& tok, std::vector<std::string> stop, Part start);

    // The part generation starts in after `prompt`: reasoning when the prompt's last turn has
    // an open <think> (a thinking chat prompt ends with "<think>\n").
    static Part start_part(const df::tokenizer::Tokenizer& tok, std::span<const int32_t> prompt);

    struct Out {
        std::string text;  // released text, all of one part
        Part part;
        bool stopped;      // a stop string was found: text ends before it, nothing more comes
    };
    // Adds one generated token. final: nothing follows, so everything held back is released
    // (an incomplete UTF-8 sequence as U+FFFD).
    Out push(int32_t id, bool final);
    // The part the next token belongs to.
    Part part() const { return part_; }

private:
    void add(std::string t, bool release, Out& out);
    size_t stop_prefix_tail(const std::string& s) const;

    const df::tokenizer::Tokenizer* tok_;
    df::tokenizer::StreamDecoder dec_;
    std::vector<std::string> stop_;
    int32_t think_open_, think_close_;
    Part part_;
    bool at_start_ = true;  // no text yet in this part: leading newlines are dropped
    bool stopped_ = false;
    std::string newlines_;  // reasoning's trailing newlines: dropped if </think> follows
    std::string held_;      // text that may be the start of a stop string
};

}  // namespace diskformer
