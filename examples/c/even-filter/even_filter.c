// A weft filter, in C: keep a change when its record's integer `id` is even,
// drop it when odd; a record whose `id` is absent, null or not an integer
// (a string, a fraction, out of the 64-bit range) is a permanent error
// ("record has no integer id").
//
// The same filter exists in Rust, JavaScript and Python under `examples/`;
// `tests/e2e/languages.rs` checks that all four agree.
//
// `filter.h`/`filter.c` are generated at build time by `wit-bindgen c` from
// `wit/` (world `filter`); build with scripts/build-examples.sh or see
// docs/plugins.md, "Other languages".
//
// C has no JSON reader in its standard library, so this file carries a small
// one: it walks the top-level object of the record text, skipping every
// value but the one under the key "id". Keys are compared as they are
// written (Postgres's `to_jsonb()` never escapes plain ASCII letters).

#include <errno.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>

#include "filter.h"

static const char NO_ID[] = "record has no integer id";

typedef struct {
    const uint8_t *at;
    const uint8_t *end;
} cursor_t;

static void skip_space(cursor_t *c) {
    while (c->at < c->end && (*c->at == ' ' || *c->at == '\t' || *c->at == '\n' || *c->at == '\r')) {
        c->at++;
    }
}

// Skips a string whose opening quote is at the cursor; false if unterminated.
static bool skip_string(cursor_t *c) {
    c->at++;
    while (c->at < c->end) {
        uint8_t byte = *c->at++;
        if (byte == '"') {
            return true;
        }
        if (byte == '\\') {
            if (c->at == c->end) {
                return false;
            }
            c->at++;
        }
    }
    return false;
}

// Skips one value of any kind; false on malformed input.
static bool skip_value(cursor_t *c) {
    skip_space(c);
    if (c->at == c->end) {
        return false;
    }
    if (*c->at == '"') {
        return skip_string(c);
    }
    if (*c->at == '{' || *c->at == '[') {
        // Nested containers: count depth, stepping over strings whole.
        int depth = 0;
        while (c->at < c->end) {
            uint8_t byte = *c->at;
            if (byte == '"') {
                if (!skip_string(c)) {
                    return false;
                }
                continue;
            }
            c->at++;
            if (byte == '{' || byte == '[') {
                depth++;
            } else if (byte == '}' || byte == ']') {
                if (--depth == 0) {
                    return true;
                }
            }
        }
        return false;
    }
    // A number, true, false or null: up to the next delimiter.
    const uint8_t *start = c->at;
    while (c->at < c->end && *c->at != ',' && *c->at != '}' && *c->at != ']' && *c->at != ' ' &&
           *c->at != '\t' && *c->at != '\n' && *c->at != '\r') {
        c->at++;
    }
    return c->at > start;
}

// Parses a JSON integer (an optional minus and digits, no fraction or
// exponent) that fits in int64_t.
static bool parse_int64(const uint8_t *start, const uint8_t *end, int64_t *out) {
    size_t len = (size_t)(end - start);
    if (len == 0 || len > 20) {
        return false;
    }
    char text[21];
    memcpy(text, start, len);
    text[len] = '\0';
    const char *digits = text[0] == '-' ? text + 1 : text;
    if (*digits == '\0') {
        return false;
    }
    for (const char *p = digits; *p; p++) {
        if (*p < '0' || *p > '9') {
            return false;
        }
    }
    errno = 0;
    long long value = strtoll(text, NULL, 10);
    if (errno == ERANGE) {
        return false;
    }
    *out = (int64_t)value;
    return true;
}

// Finds the top-level key "id" in a JSON object and reads it as an integer.
static bool record_id(const uint8_t *text, size_t len, int64_t *id) {
    cursor_t c = {text, text + len};
    skip_space(&c);
    if (c.at == c.end || *c.at != '{') {
        return false;
    }
    c.at++;
    for (;;) {
        skip_space(&c);
        if (c.at == c.end || *c.at != '"') {
            return false; // the end of the object ('}') or malformed
        }
        const uint8_t *key = c.at + 1;
        if (!skip_string(&c)) {
            return false;
        }
        bool is_id = (c.at - 1 - key) == 2 && key[0] == 'i' && key[1] == 'd';
        skip_space(&c);
        if (c.at == c.end || *c.at != ':') {
            return false;
        }
        c.at++;
        skip_space(&c);
        const uint8_t *value = c.at;
        if (!skip_value(&c)) {
            return false;
        }
        if (is_id) {
            return parse_int64(value, c.at, id);
        }
        skip_space(&c);
        if (c.at == c.end || *c.at != ',') {
            return false;
        }
        c.at++;
    }
}

// The bindings hand over ownership of the arguments (free them) and free
// the returned list and its strings after the host has read them.

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
        const filter_string_t *record = &batch->ptr[i].record;
        int64_t id;
        if (record_id(record->ptr, record->len, &id)) {
            ret->ptr[i].is_err = false;
            ret->ptr[i].val.ok = id % 2 == 0;
        } else {
            ret->ptr[i].is_err = true;
            ret->ptr[i].val.err.tag = WEFT_PLUGIN_TYPES_FUNCTION_ERROR_PERMANENT;
            filter_string_dup(&ret->ptr[i].val.err.val.permanent, NO_ID);
        }
    }
    filter_list_change_free(batch);
    filter_batch_context_free(context);
}
