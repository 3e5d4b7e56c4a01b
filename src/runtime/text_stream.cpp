#include "runtime/text_stream.h"

#include <algorithm>

#include "runtime/utf8_lead.h"

namespace diskformer {
namespace {

// Bytes of an incomplete UTF-8 sequence at the very end are not text: one U+FFFD for them.
std::string complete_utf8(std::string bytes) { return bytes.empty() ? bytes : std::string(kUtf8Replacement); }

}  // namespace

TextStream::TextStream(const df::tokenizer::Tokenizer& tok, std::vector<std::string> stop, Part start)
    : tok_(&tok),
      dec_(tok, false),
      stop_(std::move(stop)),
      think_open_(tok.find("<think>")),
      think_close_(tok.find("</think>")),
      part_(start) {}

Part TextStream::start_part(const df::tokenizer::Tokenizer& tok, std::span<const int32_t> prompt) {
    const int32_t open = tok.find("<think>"), close = tok.find("</think>"), turn = tok.find("<|im_start|>");
    for (size_t i = prompt.size(); i-- > 0;) {
        if (prompt[i] == close || prompt[i] == turn) return Part::answer;
        if (prompt[i] == open) return Part::reasoning;
    }
    return Part::answer;
}

size_t TextStream::stop_prefix_tail(const std::string& s) const {
    size_t best = 0;
    for (const auto& stop : stop_)
        for (size_t n = std::min(stop.size() - 1, s.size()); n > best; --n)
            if (s.compare(s.size() - n, n, stop, 0, n) == 0) {
                best = n;
                break;
            }
    return best;
}

void TextStream::add(std::string t, bool release, Out& out) {
    if (at_start_) {
        t.erase(0, std::min(t.size(), t.find_first_not_of('\n')));
        at_start_ = t.empty();
    }
    if (part_ == Part::reasoning) {
        t.insert(0, newlines_);
        newlines_.clear();
        if (!release) {
            const size_t end = t.find_last_not_of('\n') + 1;  // npos + 1 == 0: all newlines
            newlines_ = t.substr(end);
            t.resize(end);
        }
    }
    std::string s = held_ + t;
    held_.clear();
    size_t cut = std::string::npos;
    for (const auto& stop : stop_) cut = std::min(cut, s.find(stop));
    if (cut != std::string::npos) {
        s.resize(cut);
        out.stopped = stopped_ = true;
    } else if (!release) {
        // Cuts fall on character boundaries: s is whole characters and a stop string starts
        // with a lead byte.
        const size_t keep = stop_prefix_tail(s);
        held_ = s.substr(s.size() - keep);
        s.resize(s.size() - keep);
    }
    out.text += s;
}

TextStream::Out TextStream::push(int32_t id, bool final) {
    Out out{{}, part_, false};
    if (stopped_) return out;
    if (id >= 0 && (id == think_open_ || id == think_close_)) {
        // A part ends: release what it held, less the newlines before </think>.
        newlines_.clear();
        add(complete_utf8(dec_.flush()), true, out);
        part_ = id == think_open_ ? Part::reasoning : Part::answer;
        at_start_ = true;
        return out;
    }
    std::string t = tok_->is_eog(id) ? std::string() : valid_utf8(dec_.push(id));
    if (final) t += complete_utf8(dec_.flush());
    add(std::move(t), final, out);
    return out;
}

}  // namespace diskformer
