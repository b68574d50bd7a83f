// sample.h — text from a model: each new token from the full context (no KV cache), drawn
// from the softmax of the last logits after temperature, top-k and top-p (nucleus) filtering,
// with the random number of token i drawn from (seed, i): the same seed gives the same text.
#pragma once
#include <stdint.h>
#include <stdio.h>
#include "model/pipeline.h"
#include "io/tokenizer.h"

typedef struct {
    int ntok;            // tokens to generate at most
    float temperature;   // 0: greedy (in effect)
    int top_k;           // 0: all
    float top_p;         // 1: all; else the smallest set of tokens whose probability reaches top_p
    const char *stop;    // stop once the generated text contains it (NULL or "": never)
    uint64_t seed;
} SampleOpts;

// The prompt's token ids (ted_free them): bytes for a byte model (tok NULL; an empty prompt is
// "\n"), else tok's encoding (an empty prompt is <|endoftext|>). *n: how many.
int *sample_encode_prompt(const Tokenizer *tok, const char *text, int *n);
// Writes the generated text to out as it goes (bytes for a byte model, else decoded with tok),
// then a newline. Every rank of the model runs it (the pipeline's stages pass the context
// along); out is NULL on ranks that do not print. Returns the number of tokens generated.
long sample_text(Pipeline *P, const Tokenizer *tok, const int *prompt, int np, const SampleOpts *o, FILE *out);
