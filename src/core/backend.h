// backend.h — one op interface, two backends. Each op (ops.c, router.c, dispatcher.c,
// experts.c) begins with ON_GPU(cu_op(args)): on a GPU run it calls the CUDA version of
// itself and returns; otherwise the CPU code below it runs. A room declares its ops' CUDA
// twins in its own header (nn/ops_cuda.h, moe/moe_cuda.h, parallel/adam_cuda.h; the runtime
// in core/device.h); src/cuda implements them.
#pragma once
#include "core/alloc.h"
#ifdef TED_CUDA
#include "core/device.h"
#define ON_GPU(call) do { if (ted_device == DEV_CUDA) { call; return; } } while (0)
#else
#define ON_GPU(call) do { } while (0)
#endif
