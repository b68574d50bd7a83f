// json_keys.c — the keys of a training config (DeepSpeed's names where DeepSpeed has the setting,
// plus the "model" and "moe" sections, docs/config.md) and of a checkpoint's flat config.json,
// each with the field of Config it sets; and the DeepSpeed keys ted knows and does not honour.
#include "config/tables.h"
#include <string.h>

// clang-format off
#define MODEL_KEY(name, kind) {#name, kind, CF(model.name), NULL},
static const JKey model_keys[] = { MODEL_FIELDS(MODEL_KEY) ARCH_FIELDS(MODEL_KEY) {NULL, 0, 0, NULL} };
static const JKey moe_keys[] = { MOE_FIELDS(MODEL_KEY) ROUTE_FIELDS(MODEL_KEY)
                                  {"overlap_degree", J_INT, CF(overlap_degree), NULL},
                                  {"progress_thread", J_BOOL, CF(progress_thread), NULL}, {NULL, 0, 0, NULL} };
const JKey config_flat_keys[] = {
    MODEL_FIELDS(MODEL_KEY) MOE_FIELDS(MODEL_KEY)
    {"seq_len", J_INT, CF(seq_len), NULL}, ROUTE_FIELDS(MODEL_KEY) ARCH_FIELDS(MODEL_KEY)
    {"sparse_attention", J_SPARSE, CF(sparse), NULL},
    {NULL, 0, 0, NULL}
};

static const JKey optimizer_params[] = {
    {"lr", J_FLOAT, CF(lr), NULL},
    {"betas", J_BETAS, 0, NULL},
    {"eps", J_FLOAT, CF(eps), NULL},
    {"weight_decay", J_FLOAT, CF(weight_decay), NULL},
    {"freeze_step", J_INT, CF(freeze_step), NULL},
    {"compression", J_COMPRESSION, CF(compression), NULL},
    {"adam_w_mode", J_ADAM_W_MODE, CF(adam_w_mode), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey optimizer_keys[] = {
    {"type", J_OPTIMIZER_TYPE, 0, NULL},
    {"params", J_SECTION, 0, optimizer_params},
    {"tile_size", J_LONG, CF(tile_size), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey scheduler_params[] = {
    {"warmup_num_steps", J_INT, CF(warmup), NULL},
    {"min_lr", J_MIN_LR, CF(min_lr), NULL},
    {"warmup_min_lr", J_FLOAT, CF(sched.warmup_min_lr), NULL},
    {"warmup_max_lr", J_FLOAT, CF(sched.warmup_max_lr), NULL},
    {"warmup_type", J_WARMUP_TYPE, CF(sched.warmup_linear), NULL},
    {"total_num_steps", J_INT, CF(sched.total_num_steps), NULL},
    {"warmup_min_ratio", J_FLOAT, CF(sched.warmup_min_ratio), NULL},
    {"cos_min_ratio", J_FLOAT, CF(sched.cos_min_ratio), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey scheduler_keys[] = {
    {"type", J_SCHEDULER_TYPE, CF(sched.type), NULL},
    {"params", J_SECTION, 0, scheduler_params},
    {NULL, 0, 0, NULL}
};
static const JKey bf16_keys[] = { {"enabled", J_BOOL, CF(bf16), NULL}, {NULL, 0, 0, NULL} };
static const JKey fp16_keys[] = {
    {"enabled", J_BOOL, CF(fp16), NULL},
    {"loss_scale", J_FLOAT, CF(scaler.loss_scale), NULL},
    {"initial_scale_power", J_INT, CF(scaler.initial_scale_power), NULL},
    {"loss_scale_window", J_INT, CF(scaler.window), NULL},
    {"hysteresis", J_INT, CF(scaler.hysteresis), NULL},
    {"consecutive_hysteresis", J_BOOL, CF(scaler.consecutive_hysteresis), NULL},
    {"min_loss_scale", J_FLOAT, CF(scaler.min_scale), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey offload_keys[] = {
    {"device", J_OFFLOAD_DEVICE, CF(offload), NULL},
    {"pin_memory", J_NO_EFFECT, 0, NULL},
    {NULL, 0, 0, NULL}
};
static const JKey zero_keys[] = {
    {"stage", J_INT, CF(zero_stage), NULL},
    {"reduce_bucket_size", J_LONG, CF(reduce_bucket_size), NULL},
    {"overlap_comm", J_BOOL, CF(overlap_comm), NULL},
    {"offload_optimizer", J_SECTION, 0, offload_keys},
    {"contiguous_gradients", J_NO_EFFECT, 0, NULL},
    {"reduce_scatter", J_NO_EFFECT, 0, NULL},
    {"allgather_partitions", J_NO_EFFECT, 0, NULL},
    {"allgather_bucket_size", J_NO_EFFECT, 0, NULL},
    {"round_robin_gradients", J_NO_EFFECT, 0, NULL},
    {NULL, 0, 0, NULL}
};
static const JKey checkpointing_keys[] = {
    {"enabled", J_BOOL, CF(activation_checkpointing), NULL},
    {"partition_activations", J_OFF_ONLY, 0, NULL},
    {"contiguous_memory_optimization", J_OFF_ONLY, 0, NULL},
    {"cpu_checkpointing", J_OFF_ONLY, 0, NULL},
    {NULL, 0, 0, NULL}
};
static const JKey tensorboard_keys[] = {
    {"enabled", J_BOOL, CF(tb_enabled), NULL},
    {"output_path", J_PATH, CF(tb_path), NULL},
    {"job_name", J_NAME, CF(tb_job), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey csv_keys[] = {
    {"enabled", J_BOOL, CF(csv_enabled), NULL},
    {"output_path", J_PATH, CF(csv_path), NULL},
    {"job_name", J_NAME, CF(csv_job), NULL},
    {NULL, 0, 0, NULL}
};
static const JKey pipeline_keys[] = {
    {"schedule", J_PP_SCHEDULE, CF(pp_schedule), NULL},
    {"virtual_stages", J_INT, CF(pp_virtual), NULL},
    {"layers", J_PP_LAYERS, 0, NULL},
    {NULL, 0, 0, NULL}
};
const JKey config_top_keys[] = {
    {"train_micro_batch_size_per_gpu", J_INT, CF(micro_batch), NULL},
    {"train_batch_size", J_INT, CF(train_batch_size), NULL},
    {"gradient_accumulation_steps", J_INT, CF(grad_accum), NULL},
    {"train_steps", J_INT, CF(steps), NULL},
    {"seq_len", J_INT, CF(seq_len), NULL},
    {"seed", J_SEED, CF(seed), NULL},
    {"gradient_clipping", J_FLOAT, CF(clip), NULL},
    {"data_order", J_ORDER, CF(data_sequential), NULL},
    {"eval_every", J_INT, CF(eval_every), NULL},
    {"eval_windows", J_INT, CF(eval_windows), NULL},
    {"save_every", J_INT, CF(save_every), NULL},
    {"log_every", J_INT, CF(log_every), NULL},
    {"steps_per_print", J_INT, CF(log_every), NULL},
    {"wall_clock_breakdown", J_BOOL, CF(wall_clock_breakdown), NULL},
    {"sample_every", J_INT, CF(sample_every), NULL},
    {"threads", J_INT, CF(threads), NULL},
    {"tp", J_INT, CF(tp), NULL},
    {"ep", J_INT, CF(ep), NULL},
    {"pp", J_INT, CF(pp), NULL},
    {"pipeline", J_SECTION, 0, pipeline_keys},
    {"dtd", J_BOOL, CF(dtd), NULL},
    {"cac", J_BOOL, CF(cac), NULL},
    {"optimizer", J_SECTION, 0, optimizer_keys},
    {"scheduler", J_SECTION, 0, scheduler_keys},
    {"bf16", J_SECTION, 0, bf16_keys},
    {"fp16", J_SECTION, 0, fp16_keys},
    {"zero_optimization", J_SECTION, 0, zero_keys},
    {"activation_checkpointing", J_SECTION, 0, checkpointing_keys},
    {"model", J_SECTION, 0, model_keys},
    {"moe", J_SECTION, 0, moe_keys},
    {"sparse_attention", J_SPARSE, CF(sparse), NULL},
    {"tensorboard", J_SECTION, 0, tensorboard_keys},
    {"csv_monitor", J_SECTION, 0, csv_keys},
    {"comment", J_COMMENT, 0, NULL},
    {"_comment", J_COMMENT, 0, NULL},
    {NULL, 0, 0, NULL}
};

// DeepSpeed keys that ted knows and does not do: why, instead of "unknown".
static const char *const not_honoured[][2] = {
    {"activation_checkpointing.partition_activations", "ted's checkpointing keeps each rank's activations whole"},
    {"activation_checkpointing.contiguous_memory_optimization", "ted's checkpointed activations are not moved into one buffer"},
    {"activation_checkpointing.cpu_checkpointing", "ted keeps checkpointed activations in device memory"},
    {"zero_optimization.offload_param", "ted offloads the optimizer state only (offload_optimizer)"},
    {"zero_optimization.stage3_max_live_parameters", "ted has ZeRO stages 0, 1 and 2"},
    {"fp16.auto_cast", "ted casts inside its own mixed-precision ops"},
    {"amp", "ted has bf16 and fp16, not apex amp"},
    {"communication_data_type", "ted's collectives carry the gradients' own type"},
    {"prescale_gradients", "ted scales the gradients once, in the optimizer"},
    {"gradient_predivide_factor", "ted scales the gradients once, in the optimizer"},
    {"wandb", "ted logs to --log (JSON lines), tensorboard or csv_monitor"},
    {"comet", "ted logs to --log (JSON lines), tensorboard or csv_monitor"},
    {"flops_profiler", "ted reports MFU on its progress line and in --log"},
};


// DeepSpeed keys accepted with no effect (a config runs unedited): what ted does in their place,
// and which value asks for what ted does anyway ('t' true, 'f' false; 'n': a number ted has no use
// for). A value asking for something else gets one warning line at start (config_warn).
static const struct { const char *key; char ted_does; const char *why; } no_effect[] = {
    {"zero_optimization.contiguous_gradients", 't', "ted keeps every gradient in one contiguous buffer anyway"},
    {"zero_optimization.reduce_scatter", 't', "ted reduce-scatters the gradients at stages 1 and 2 and all-reduces them "
                                              "at stage 0: the same averages"},
    {"zero_optimization.allgather_partitions", 't', "ted all-gathers the updated parameters: the same parameters"},
    {"zero_optimization.allgather_bucket_size", 'n', "ted gathers each parameter whole, in no buckets"},
    {"zero_optimization.round_robin_gradients", 'f', "an order of gradient copies in DeepSpeed's CPU offload; ted "
                                                     "steps each rank's shard where it is"},
    {"zero_optimization.offload_optimizer.pin_memory", 'f', "ted's host buffers are ordinary (pageable) memory"},
};
// clang-format on

const char *config_not_honoured(const char *key) {
    for (size_t i = 0; i < sizeof not_honoured / sizeof not_honoured[0]; i++)
        if (!strcmp(not_honoured[i][0], key)) return not_honoured[i][1];
    return NULL;
}

const char *config_no_effect_key(int i, char *ted_does, const char **why) {
    if (i < 0 || i >= (int)(sizeof no_effect / sizeof no_effect[0])) return NULL;
    *ted_does = no_effect[i].ted_does;
    *why = no_effect[i].why;
    return no_effect[i].key;
}
