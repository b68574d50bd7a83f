// upcycle.h — `ted upcycle --load DENSE --num-experts E [--top-k K] [--granularity G] --save DIR`:
// parses and reports; the work is io/upcycle.
#pragma once

int upcycle_main(int argc, char **argv);
