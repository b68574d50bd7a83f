// precision.h — the storage format of a run's weights, activations and gradients: fp32, or one
// of the 16-bit formats (computing in fp32 from them; core/half.h converts).
#pragma once

typedef enum { PREC_FP32, PREC_BF16, PREC_FP16 } Precision;

// Bytes per stored element.
static inline int precision_bytes(Precision p) { return p == PREC_FP32 ? 4 : 2; }
