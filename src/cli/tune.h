// tune.h — `ted tune`: the best layouts of a model on a cluster, by the performance model.
#pragma once
int tune_main(int argc, char **argv);
