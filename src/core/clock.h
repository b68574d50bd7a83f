// clock.h — time.
#pragma once

double now_ms(void);
// CPU time of the whole process (all its threads), ms: steadier than the wall clock on a shared machine.
double cpu_ms(void);
