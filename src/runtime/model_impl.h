// What a diskformer::Model holds (shared by the runtime's translation units).
#pragma once

#include <memory>
#include <mutex>

#include "backend/backend.h"
#include "diskformer/diskformer.h"
#include "model/model.h"
#include "runtime/engine.h"
#include "runtime/token_trie.h"
#include "tokenizer/tokenizer.h"

namespace diskformer {

struct Model::Impl {
    std::shared_ptr<df::Backend> backend;
    std::shared_ptr<Engine> engine;  // the backend's: every use of it goes through the engine
    std::unique_ptr<df::model::Model> model;
    // Scratch of the batched steps of this model's sessions (Engine), made on first use with
    // the engine held.
    std::unique_ptr<df::model::State> lanes;
    std::unique_ptr<df::tokenizer::Tokenizer> tokenizer;  // null when the file has none
    std::string tokenizer_error;                         // why, when null
    ModelInfo info;

    ~Impl() {
        if (!lanes) return;
        Engine::Lock hold(*engine);
        model->free_state(*lanes);
    }

    // The tokenizer's texts as a trie, built on first use (JSON mode); thread-safe.
    const TokenTrie& token_trie() const {
        std::call_once(trie_once_, [this] { trie_ = std::make_unique<TokenTrie>(*tokenizer); });
        return *trie_;
    }

private:
    mutable std::once_flag trie_once_;
    mutable std::unique_ptr<TokenTrie> trie_;
};

}  // namespace diskformer
