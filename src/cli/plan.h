// plan.h — `ted plan`: the memory model of design §5 (M1, M2) and of model/memplan.h: model-state
// bytes per GPU under TED with ZeRO stage 0, 1 or 2 (and offload), activations, the largest base
// model that fits.
#pragma once

// `ted plan --base-params N --experts E --gpus G [...]` or `ted plan --config FILE --gpus G [...]`
int plan_main(int argc, char **argv);
