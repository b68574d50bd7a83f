// evaluate.h — the mean loss over the first windows of a split, in the sequential numbering of
// design §3 (window i = tokens [iT, iT+T+1)): what `ted train` logs as val_loss and `ted eval`
// prints. Every rank runs the same forwards; each data-parallel rank takes its share.
#pragma once
#include "io/data.h"
#include "io/progress.h"
#include "model/pipeline.h"

typedef struct {
    double loss, lm, aux;
    long windows;
} EvalResult;

// The first nwin windows of s (T tokens each); tk, when not NULL, shows the progress.
EvalResult evaluate(Pipeline *P, const Split *s, long nwin, int T, Ticker *tk);
