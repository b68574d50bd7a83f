// json.h — a JSON file read whole as ted reads every one it is given (config.json of a
// transformers folder, cluster files, trainer state): parsed, an object at the top, no key twice
// in one object (cJSON keeps both and reads the first; Python's json reads the last).
#pragma once
#include <cjson/cJSON.h>

// The parsed object, or NULL after one line naming path and what is wrong.
cJSON *json_read_object(const char *path);
// The first key that appears twice in one object anywhere under j, or NULL.
const char *json_duplicate_key(const cJSON *j);
