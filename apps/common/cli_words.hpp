// What the user typed that the command line does not know, caught before CLI11 parses it so
// the error can say what was probably meant:
//   troupe trian            -> unknown command 'trian'; did you mean 'train'?
//   troupe train --lr-warmup-iter 5 -> unknown flag '--lr-warmup-iter' for 'troupe train'; did you mean
//   '--lr-warmup-iters'?
#pragma once

#include <CLI/CLI.hpp>

#include <optional>
#include <string>
#include <vector>

namespace troupe::apps {

// The candidate closest to `given` by edit distance, if close enough to be a likely typo.
std::optional<std::string> closest_word(const std::string& given, const std::vector<std::string>& candidates);

// An error message for the first unknown command or flag in `args` (without the program
// name), or "" when every one is known.
std::string unknown_words(const CLI::App& app, const std::vector<std::string>& args);

}  // namespace troupe::apps
