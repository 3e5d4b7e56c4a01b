// What a diskformer::Model holds (shared by the runtime's translation units).
#pragma once

#include <memory>

#include "backend/backend.h"
#include "diskformer/diskformer.h"
#include "model/model.h"
#include "tokenizer/tokenizer.h"

namespace diskformer {

struct Model::Impl {
    std::shared_ptr<df::Backend> backend;
    std::unique_ptr<df::model::Model> model;
    std::unique_ptr<df::tokenizer::Tokenizer> tokenizer;  // null when the file has none
    std::string tokenizer_error;                         // why, when null
    ModelInfo info;
};

}  // namespace diskformer
