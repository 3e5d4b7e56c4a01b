#include "model/arch.h"

namespace df::model {

extern const ArchEntry kQwen35;
extern const ArchEntry kQwen3;

std::span<const ArchEntry> arch_registry() {
    static const ArchEntry entries[] = {kQwen35, kQwen3};
    return entries;
}

const ArchEntry* find_arch(std::string_view name) {
    for (const auto& e : arch_registry())
        if (e.name == name) return &e;
    return nullptr;
}

}  // namespace df::model
