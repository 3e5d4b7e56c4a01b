// Number checks for command-line options whose messages say the bounds plainly (CLI11's
// PositiveNumber and NonNegativeNumber print the largest double as the end of their range, its
// Range prints "0.000000").
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <string>

// A bound as a person writes it: 1, 0.5, 65535.
inline std::string plain_number(double v) {
    char buf[32];
    std::snprintf(buf, sizeof buf, "%.10g", v);
    return buf;
}

// A number check: `ok` says whether the value passes, `need` what it must be ("at least 1"),
// `desc` the bound in --help.
template <class Ok>
CLI::Validator number_check(Ok ok, const std::string& need, const std::string& desc) {
    return CLI::Validator(
        [ok, need](std::string& s) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(s, v)) return "'" + s + "' is not a number";
            if (ok(v)) return {};
            return "must be " + need + ", got " + s;
        },
        desc);
}

// The value is a number and at least `lo` (above it when `strict`).
inline CLI::Validator at_least(double lo, bool strict = false) {
    const std::string bound = plain_number(lo);
    return number_check([lo, strict](double v) { return strict ? v > lo : v >= lo; },
                        (strict ? "above " : "at least ") + bound, (strict ? "> " : ">= ") + bound);
}
inline CLI::Validator non_negative() { return at_least(0); }
inline CLI::Validator positive() { return at_least(0, true); }

// The value is a number in [lo, hi].
inline CLI::Validator in_range(double lo, double hi) {
    const std::string range = plain_number(lo) + " to " + plain_number(hi);
    return number_check([lo, hi](double v) { return v >= lo && v <= hi; }, range, "[" + range + "]");
}
