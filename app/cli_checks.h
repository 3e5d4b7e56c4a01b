// Number checks for command-line options whose messages say the bound plainly (CLI11's
// PositiveNumber and NonNegativeNumber print the largest double as the end of their range).
#pragma once

#include <CLI/CLI.hpp>

#include <string>

// The value is a number and at least `lo` (above it when `strict`).
inline CLI::Validator at_least(double lo, bool strict = false) {
    const std::string bound = lo == static_cast<double>(static_cast<long long>(lo)) ? std::to_string(static_cast<long long>(lo)) : std::to_string(lo);
    const std::string need = (strict ? "above " : "at least ") + bound;
    return CLI::Validator(
        [lo, strict, need](std::string& s) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
            if (strict ? v > lo : v >= lo) return {};
            return "must be " + need + ", got " + s;
        },
        (strict ? "> " : ">= ") + bound);
}
inline CLI::Validator non_negative() { return at_least(0); }
inline CLI::Validator positive() { return at_least(0, true); }
