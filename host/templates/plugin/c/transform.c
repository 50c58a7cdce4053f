// {{name}}: a weft transform, in C. It turns each change into
// {"action": ..., "record": {...}}; change `payload` to build what the sink
// sends.
//
// `transform.h`/`transform.c` are generated at build time by `wit-bindgen c`
// from wit/ (world `transform`). `change->record` is the row as JSON text
// (not NUL-terminated: use its `len`). The bindings hand over ownership of
// the arguments (free them) and free the returned list after the host read
// it.

#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "transform.h"

static const char *action_name(uint8_t action) {
    switch (action) {
    case WEFT_PLUGIN_TYPES_ACTION_INSERT: return "insert";
    case WEFT_PLUGIN_TYPES_ACTION_UPDATE: return "update";
    case WEFT_PLUGIN_TYPES_ACTION_DELETE: return "delete";
    default: return "read";
    }
}

// Writes {"action":"<action>","record":<record>} into `out`.
static void payload(const transform_change_t *change, transform_string_t *out) {
    const char *action = action_name(change->action);
    const char *parts[] = {"{\"action\":\"", action, "\",\"record\":"};
    size_t len = 0;
    for (size_t p = 0; p < 3; p++) len += strlen(parts[p]);
    len += change->record.len + 1; // and the closing brace
    uint8_t *text = malloc(len);
    if (!text) {
        abort(); // out of memory: trap, the host retries on a fresh instance
    }
    size_t at = 0;
    for (size_t p = 0; p < 3; p++) {
        memcpy(text + at, parts[p], strlen(parts[p]));
        at += strlen(parts[p]);
    }
    memcpy(text + at, change->record.ptr, change->record.len);
    at += change->record.len;
    text[at] = '}';
    out->ptr = text;
    out->len = len;
}

bool exports_transform_init(transform_config_t *config, transform_string_t *err) {
    (void)err;
    transform_config_free(config);
    return true;
}

void exports_transform_transform(transform_batch_context_t *context, transform_list_change_t *batch,
                                 transform_list_result_payload_function_error_t *ret) {
    ret->len = batch->len;
    ret->ptr = batch->len ? calloc(batch->len, sizeof(*ret->ptr)) : NULL;
    if (batch->len && !ret->ptr) {
        abort();
    }
    for (size_t i = 0; i < batch->len; i++) {
        ret->ptr[i].is_err = false;
        ret->ptr[i].val.ok.tag = WEFT_PLUGIN_TYPES_PAYLOAD_JSON;
        payload(&batch->ptr[i], &ret->ptr[i].val.ok.val.json);
    }
    transform_list_change_free(batch);
    transform_batch_context_free(context);
}
