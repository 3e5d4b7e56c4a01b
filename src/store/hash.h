// Hashing inside the store: a copy hashed as it is written (one pass over the source).
#pragma once

#include <string>

namespace diskformer::store {

// Copies src to dst (flushed to disk) and returns the sha256 of the bytes, lower-case hex.
std::string copy_hashing(const std::string& src, const std::string& dst);

}  // namespace diskformer::store
