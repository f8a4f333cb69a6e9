/*
 * Shared by _columns.c (the column builder) and _columns_props.c (reading a
 * message's properties): the MessageExt slots read, the property names that
 * matter, and the kept properties of one message.
 */
#ifndef RMQK_COLUMNS_H
#define RMQK_COLUMNS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* In the order columns.py's _SLOT_ORDER hands their descriptors over. */
enum {
    S_TOPIC,
    S_BODY,
    S_QUEUE_ID,
    S_QUEUE_OFFSET,
    S_BORN_TIMESTAMP,
    S_STORE_TIMESTAMP,
    S_RECONSUME_TIMES,
    S_BROKER_NAME,
    S_PROPS_RAW,
    S_PROPS,
    N_SLOTS
};

/* An outcome besides 0 (done) and -1 (a Python error to raise): the Python builder decides. */
#define FALLBACK 1
#define MAX_NAMES 16
#define MAX_NAME_LEN 63

/* The property keys with a column of their own, and those the map leaves out. */
enum { ROLE_NONE, ROLE_UNIQ, ROLE_KEYS, ROLE_TAGS };

typedef struct {
    char text[MAX_NAME_LEN + 1];
    Py_ssize_t len;
    int role;
    int hidden;
} name_t;

extern Py_ssize_t col_slot_offsets[N_SLOTS];
extern name_t col_names[MAX_NAMES];
extern Py_ssize_t col_n_names;
/* Bit n set when one of those names is n bytes long: most keys need no comparison. */
extern uint64_t col_name_lengths;

static inline PyObject *slot(PyObject *obj, int s) {
    return *(PyObject **)((char *)obj + col_slot_offsets[s]);
}

/* The configured name a key is, or NULL. */
static inline const name_t *name_of(const char *p, Py_ssize_t n) {
    if (n > MAX_NAME_LEN || !((col_name_lengths >> n) & 1)) {
        return NULL;
    }
    for (Py_ssize_t x = 0; x < col_n_names; x++) {
        const name_t *name = &col_names[x];
        if (n == name->len && p[0] == name->text[0] && memcmp(p, name->text, (size_t)n) == 0) {
            return name;
        }
    }
    return NULL;
}

/* One kept property of the message at hand (pointing into its text). */
typedef struct {
    const char *key, *value;
    Py_ssize_t key_len, value_len;
} entry_t;

typedef struct {
    entry_t *items;
    Py_ssize_t len, cap;
} entries_t;

int col_utf8_of(PyObject *s, const char **p, Py_ssize_t *n);
int col_read_properties(PyObject *m, entries_t *e, PyObject **hold);
int col_add_name(PyObject *s, int role, int hidden);

#endif
