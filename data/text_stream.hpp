// Streaming the text of a growing token sequence: after each new token the whole sequence is
// decoded again (so every decoder, byte fallback and SentencePiece's leading-space strip
// included, gives the text HF's decode gives), and only the part later tokens cannot change
// is sent.
//
//   std::string text = tok.decode_skipping_special(tokens);
//   size_t end = settled_text_end(text);   // send text[sent, end)
#pragma once

#include <cstddef>
#include <string_view>

namespace troupe {

// The end of the part of `text` that later tokens cannot change: before an incomplete UTF-8
// character at its end (GPT-2's raw-byte decode), and before trailing U+FFFD characters (an HF
// decoder's stand-ins for a character whose bytes have not all come yet).
size_t settled_text_end(std::string_view text);

}  // namespace troupe
