// lr_schedule.h — the learning rate of each step: ted's WarmupCosine, and DeepSpeed's
// WarmupLR, WarmupDecayLR and WarmupCosineLR (scheduler.type; config/config.h SchedConfig).
#pragma once
#include "config/config.h"

// The learning rate of optimizer step s (0-based).
float lr_at(const Config *c, long s);
