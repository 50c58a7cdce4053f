// {{name}}: a weft filter, in C. It keeps every change but deletes; change
// `keep` to decide what the sink receives.
//
// `filter.h`/`filter.c` are generated at build time by `wit-bindgen c` from
// wit/ (world `filter`). `change->record` is the row as JSON text (not
// NUL-terminated: use its `len`). The bindings hand over ownership of the
// arguments (free them) and free the returned list after the host read it.

#include <stdbool.h>
#include <stdlib.h>

#include "filter.h"

static bool keep(const filter_change_t *change) {
    return change->action != WEFT_PLUGIN_TYPES_ACTION_DELETE;
}

bool exports_filter_init(filter_config_t *config, filter_string_t *err) {
    (void)err;
    filter_config_free(config);
    return true;
}

void exports_filter_filter(filter_batch_context_t *context, filter_list_change_t *batch, filter_list_result_bool_function_error_t *ret) {
    ret->len = batch->len;
    ret->ptr = batch->len ? calloc(batch->len, sizeof(*ret->ptr)) : NULL;
    if (batch->len && !ret->ptr) {
        abort(); // out of memory: trap, the host retries on a fresh instance
    }
    for (size_t i = 0; i < batch->len; i++) {
        ret->ptr[i].is_err = false;
        ret->ptr[i].val.ok = keep(&batch->ptr[i]);
    }
    filter_list_change_free(batch);
    filter_batch_context_free(context);
}
