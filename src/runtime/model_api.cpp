#include <chrono>
#include <thread>

#include "runtime/model_impl.h"

namespace diskformer {
namespace {

std::shared_ptr<df::Backend> make_backend(const ModelOptions& o) {
    BackendKind kind = o.backend;
#ifdef DF_HAVE_CUDA
    if (kind == BackendKind::automatic) kind = df::cuda_device_available() ? BackendKind::cuda : BackendKind::cpu;
    if (kind == BackendKind::cuda) {
        if (!df::cuda_device_available()) throw Error("--backend cuda: no CUDA device is available");
        return df::make_cuda_backend(o.device);
    }
#else
    if (kind == BackendKind::cuda) throw Error("--backend cuda: this build of diskformer has no CUDA backend");
#endif
    return df::make_cpu_backend(o.threads);
}

}  // namespace

Model::Model(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Model::~Model() = default;

namespace {

std::shared_ptr<Model> load_on(const std::string& path, std::shared_ptr<df::Backend> backend,
                               std::shared_ptr<Engine> engine, std::chrono::steady_clock::time_point t0) {
    auto impl = std::make_unique<Model::Impl>();
    impl->engine = std::move(engine);
    try {
        Engine::Lock hold(*impl->engine);
        impl->backend = std::move(backend);
        impl->model = df::model::Model::load(path, impl->backend);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(e.what());
    }
    try {
        impl->tokenizer = df::tokenizer::Tokenizer::from_gguf(impl->model->file());
    } catch (const std::exception& e) {
        impl->tokenizer_error = e.what();
    }
    const auto& c = impl->model->config();
    ModelInfo& info = impl->info;
    info.arch = c.arch;
    info.name = impl->model->file().get_or<std::string>("general.name", "");
    info.backend = impl->backend->name();
    info.n_layer = c.n_layer;
    info.n_embd = c.n_embd;
    info.n_vocab = c.n_vocab;
    info.n_ctx_train = c.n_ctx_train;
    info.weight_bytes = impl->model->weight_bytes();
    info.load_ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - t0).count();
    return Model::make(std::move(impl));
}

}  // namespace

std::shared_ptr<Model> Model::make(std::unique_ptr<Impl> impl) { return std::shared_ptr<Model>(new Model(std::move(impl))); }

std::shared_ptr<Model> Model::load(const std::string& path, const ModelOptions& options) {
    const auto t0 = std::chrono::steady_clock::now();
    std::shared_ptr<df::Backend> backend;
    try {
        backend = make_backend(options);
    } catch (const Error&) {
        throw;
    } catch (const std::exception& e) {
        throw Error(e.what());
    }
    auto engine = std::make_shared<Engine>(*backend);
    return load_on(path, std::move(backend), std::move(engine), t0);
}

std::shared_ptr<Model> Model::load_beside(const std::string& path, const Model& beside) {
    return load_on(path, beside.impl().backend, beside.impl().engine, std::chrono::steady_clock::now());
}

const ModelInfo& Model::info() const { return impl_->info; }

Model::BatchStats Model::batch_stats() const {
    const Engine::Counts c = impl_->engine->counts();
    return {c.batches, c.batched_steps, c.lone_steps};
}

std::vector<int32_t> Model::tokenize(std::string_view text, bool parse_special) const {
    if (!impl_->tokenizer) throw Error("this model has no usable tokenizer: " + impl_->tokenizer_error);
    try {
        return impl_->tokenizer->encode(text, parse_special);
    } catch (const std::exception& e) {
        throw Error(std::string("tokenize: ") + e.what());
    }
}

std::string Model::detokenize(std::span<const int32_t> ids) const {
    if (!impl_->tokenizer) throw Error("this model has no usable tokenizer: " + impl_->tokenizer_error);
    return impl_->tokenizer->decode(ids);
}

}  // namespace diskformer
