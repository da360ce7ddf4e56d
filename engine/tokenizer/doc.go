// Package tokenizer turns text into the token ids Qwen3, Qwen3.5 and Qwen3.6
// were trained on, and ids back into text, exactly as the Hugging Face
// tokenizers library does with the checkpoint's tokenizer.json.
//
// # Pipeline
//
// [Tokenizer.Encode] runs the steps of the library, in its order:
//
//  1. Added tokens (special or not) are cut out of the raw text first,
//     leftmost-longest, honouring their single_word, lstrip and rstrip flags.
//     Tokens marked normalized are matched again after step 2.
//  2. Each remaining piece is normalized (NFC).
//  3. The Split pre-tokenizer cuts the piece with the regex read from the
//     file. Go's regexp has no look-ahead, so the package compiles the
//     regex with its own backtracking matcher, which understands the
//     constructs byte-level BPE split regexes use (classes of Unicode
//     categories, greedy quantifiers, a case-insensitive group of literals,
//     a trailing negative look-ahead such as \s+(?!\S)) and rejects
//     anything else with an [ErrUnsupported] error rather than split
//     differently from the library.
//  4. Each pre-token's bytes are mapped to symbols (the GPT-2 byte map) and
//     merged pairwise by merge rank, lowest first, leftmost on ties. Words
//     of up to 256 bytes are cached, so encoding familiar text allocates
//     nothing but the result.
//
// # Decoding
//
// [Tokenizer.Decode] concatenates the bytes of the tokens and replaces
// invalid UTF-8 the way Rust's String::from_utf8_lossy does (one U+FFFD per
// maximal invalid subpart). A [StreamDecoder] does the same one id at a time
// and holds back an incomplete character until its last byte arrives, so a
// stream of deltas never carries half a character and always adds up to
// Decode of the whole sequence.
//
// # Errors
//
// A file that is not a well-formed tokenizer.json gives an error marked with
// [ErrBadTokenizer]; a well-formed one that asks for something this package
// does not implement (another model type, normalizer or regex construct)
// gives one marked with [ErrUnsupported]. Neither ever panics.
package tokenizer
