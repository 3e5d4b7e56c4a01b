#!/usr/bin/env bash
# Runs every test: the release build's unit + golden tests, the unit tests again under
# ASan+UBSan, and bounded fuzz runs (GGUF and safetensors readers, JSON mode, the server's requests). Usage: scripts/test.sh [--quick]
set -euo pipefail
cd "$(dirname "$0")/.."
JOBS=$(nproc)

# Without a GPU the CUDA code must compile but cannot run: PTX alone, no ptxas pass, and the
# device code unoptimized (DF_CUDA_CHECK_ONLY).
cuda_archs=()
command -v nvidia-smi >/dev/null 2>&1 || cuda_archs=(-DDF_CUDA_ARCHS=90-virtual -DDF_CUDA_CHECK_ONLY=ON)
scripts/setup.sh -DDF_WERROR=ON "${cuda_archs[@]}" >/dev/null
# llama.cpp v0.5.0 as the logits oracle of the differential tests (pinned in package-lock.json).
(cd tests/oracle && npm install --omit=optional --no-audit --no-fund --loglevel=error >/dev/null)
echo "== release tests"
ctest --test-dir build --output-on-failure -j "$JOBS" -LE cuda
if command -v nvidia-smi >/dev/null 2>&1 && [ -x build/tests/test_cuda ]; then
  ctest --test-dir build --output-on-failure -L cuda
else
  echo "== cuda tests: skipped (no GPU on this machine)"
fi
[ "${1:-}" = "--quick" ] && exit 0

echo "== ASan+UBSan tests (libraries and their unit tests; the CLI and server run in the release tests)"
# The heaviest repeats of the release run's model sweeps are left out here (they exercise the
# same code paths; a sweep over several models keeps one model here, and the sampler's
# whole-vocabulary draws, ~30-50 s each at -O0, run in the release tests only), and so is the app layer (its build and tests took ~7 of CI's minutes;
# test_app_NOT_BUILT is the placeholder gtest_discover_tests leaves for it). -O0: ASan
# instruments the CPU kernels' SIMD code, and at -O1 they take ~3x as long to build.
cmake -S . -B build-asan -G Ninja -DCMAKE_BUILD_TYPE=Debug -DCMAKE_CXX_FLAGS_DEBUG=-g -DDF_SANITIZE=ON -DDF_CUDA=OFF \
      -DDF_WERROR=ON >/dev/null
cmake --build build-asan --target test_quant test_gguf test_backend test_model test_tokenizer test_runtime test_store
ASAN_OPTIONS=detect_leaks=1 UBSAN_OPTIONS=print_stacktrace=1 \
  ctest --test-dir build-asan --output-on-failure -j "$JOBS" -LE 'cuda|slow|app' \
  -E 'ChunkSizesAgree|StreamingNeverSplitsUtf8|LlamaCppDiff|TokenizerBpe.MatchesReferenceOnRandomWords|JsonPatternsAndFormats|DraftPairs|AllLogitsBufferIsBounded|LongPromptsArePrefilledInSlices|ConcurrentGenerationGivesEachRequestItsOwnAnswer|DraftsGiveTheSameAnswer|BlockDrafter.AnyDraft|DraftModel.TheTargetAsItsOwnDrafter|_NOT_BUILT|Sampler.TopKOverALargeVocabulary|Sampler.TheTopCandidatesDraw|Sampler.AWholeVocabularyDraws|JsonSchemaModeFollowsTheSchema/"q3_|TheLikeliestTokensDrawWhatTheWholeRowDraws/"q35_|JsonModeKeepsTheAnswerJson/"q3_|LogprobsAreTheRawLogSoftmaxAndChangeNoToken/"q35_|LanesEqualLoneSteps/"q3_|StopStringsCutTheText/"q35_'

echo "== fuzz: GGUF reader (60 s), JSON mode's schema compiler and prefix check (30 s), safetensors reader (20 s), the server's request parsing (30 s)"
cmake -S . -B build-fuzz -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DDF_FUZZ=ON -DDF_TESTS=OFF \
      -DDF_CUDA=OFF -DCMAKE_C_COMPILER=clang -DCMAKE_CXX_COMPILER=clang++ >/dev/null
cmake --build build-fuzz --target fuzz_gguf fuzz_json fuzz_safetensors fuzz_openai
fuzz/run.sh build-fuzz/fuzz/fuzz_gguf 60
fuzz/run.sh build-fuzz/fuzz/fuzz_json 30
fuzz/run.sh build-fuzz/fuzz/fuzz_safetensors 20
fuzz/run.sh build-fuzz/fuzz/fuzz_openai 30
