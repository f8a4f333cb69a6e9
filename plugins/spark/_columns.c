/*
 * Optional compiled builder of the Spark sink's Arrow columns (rmqk.plugins.spark.columns).
 *
 * It reads consumed messages and returns the raw Arrow buffers of every column
 * (bytes objects: int32 offsets and data, fixed-width values, validity bitmaps);
 * columns.py wraps them with pyarrow.Array.from_buffers, so this file needs no
 * pyarrow headers and the per-row work never enters the interpreter.
 *
 * Only the common case is handled. Whenever a batch holds anything else (a slot
 * of an unexpected type, a message repeating a property key, a value out of a
 * column's range, text that is not UTF-8 where Python would raise) build()
 * returns None and the pure-Python builder takes the whole batch, so every odd
 * case and every error comes from one place. Tests compare the two on random and
 * hostile messages.
 *
 * MessageExt's slots are read through the offsets of its member descriptors,
 * which columns.py hands over once (configure), in the order of _columns.h's enum.
 * _columns_props.c reads the properties.
 */
#include "_columns.h"
#include "_slot_offsets.h"

static PyTypeObject *ext_type = NULL;

/*
 * ---- growable byte buffers ----
 * A bytes object grown by doubling and cut to its length at the end (realloc
 * both times), so the data is never copied into the object returned.
 */

typedef struct {
    PyObject *bytes;
    char *data;
    Py_ssize_t len, cap;
    Py_ssize_t rows; /* of the batch: the first value times this sizes the first allocation */
} buf_t;

#define FIRST_CAP_MIN 1024
#define FIRST_CAP_MAX (16 << 20)

static int buf_grow(buf_t *b, Py_ssize_t extra) {
    Py_ssize_t want = b->len + extra;
    if (want <= b->cap) {
        return 0;
    }
    Py_ssize_t cap = b->cap;
    if (cap == 0) {
        /* Values of a column are mostly alike in size: one allocation usually does. */
        cap = want < FIRST_CAP_MAX / (b->rows + 1) ? want * (b->rows + 1) : FIRST_CAP_MAX;
        cap = cap < FIRST_CAP_MIN ? FIRST_CAP_MIN : cap + cap / 4;
    }
    while (cap < want) {
        if (cap > PY_SSIZE_T_MAX / 2) {
            PyErr_NoMemory();
            return -1;
        }
        cap *= 2;
    }
    if (b->bytes == NULL) {
        b->bytes = PyBytes_FromStringAndSize(NULL, cap);
    } else if (_PyBytes_Resize(&b->bytes, cap) < 0) {
        b->data = NULL;
        b->len = b->cap = 0;
    }
    if (b->bytes == NULL) {
        return -1;
    }
    b->data = PyBytes_AS_STRING(b->bytes);
    b->cap = cap;
    return 0;
}

static inline int buf_put(buf_t *b, const void *p, Py_ssize_t n) {
    if (b->len + n > b->cap && buf_grow(b, n) < 0) {
        return -1;
    }
    if (n) {
        memcpy(b->data + b->len, p, (size_t)n);
    }
    b->len += n;
    return 0;
}

static inline int buf_put_i32(buf_t *b, int32_t v) { return buf_put(b, &v, sizeof v); }

/* The buffer's bytes (a new reference), which leaves the buffer empty. */
static PyObject *buf_bytes(buf_t *b) {
    PyObject *out = b->bytes;
    if (out == NULL) {
        return PyBytes_FromStringAndSize(NULL, 0);
    }
    b->bytes = NULL;
    b->data = NULL;
    if (_PyBytes_Resize(&out, b->len) < 0) {
        out = NULL;
    }
    b->len = b->cap = 0;
    return out;
}

static void buf_free(buf_t *b) {
    Py_CLEAR(b->bytes);
    b->data = NULL;
    b->len = b->cap = 0;
}

/* ---- output columns ---- */

/* A string or binary column: offsets (int32, rows + 1), data, and a validity bitmap if nullable. */
typedef struct {
    PyObject *offsets; /* bytes, filled in place */
    PyObject *valid;   /* bytes or NULL */
    buf_t data;
    Py_ssize_t nulls;
} varcol_t;

/* One map column: per-row entry offsets, and the flat keys and values as string columns. */
typedef struct {
    PyObject *offsets;
    buf_t key_offsets, key_data, value_offsets, value_data;
    Py_ssize_t entries;
} mapcol_t;

static int varcol_init(varcol_t *c, Py_ssize_t rows, int nullable) {
    memset(c, 0, sizeof *c);
    c->data.rows = rows;
    c->offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
    if (c->offsets == NULL) {
        return -1;
    }
    ((int32_t *)PyBytes_AS_STRING(c->offsets))[0] = 0;
    if (nullable) {
        c->valid = PyBytes_FromStringAndSize(NULL, (rows + 7) / 8);
        if (c->valid == NULL) {
            return -1;
        }
        memset(PyBytes_AS_STRING(c->valid), 0, (size_t)((rows + 7) / 8));
    }
    return 0;
}

static void varcol_free(varcol_t *c) {
    Py_CLEAR(c->offsets);
    Py_CLEAR(c->valid);
    buf_free(&c->data);
}

/* Appends row i's value (p NULL: a null); FALLBACK once the data outgrows int32 offsets. */
static inline int varcol_put(varcol_t *c, Py_ssize_t i, const char *p, Py_ssize_t n) {
    if (p == NULL) {
        c->nulls++;
    } else {
        if (n > INT32_MAX - c->data.len) {
            return FALLBACK;
        }
        if (buf_put(&c->data, p, n) < 0) {
            return -1;
        }
        if (c->valid != NULL) {
            ((unsigned char *)PyBytes_AS_STRING(c->valid))[i >> 3] |= (unsigned char)(1u << (i & 7));
        }
    }
    ((int32_t *)PyBytes_AS_STRING(c->offsets))[i + 1] = (int32_t)c->data.len;
    return 0;
}

static int string_put(buf_t *offsets, buf_t *data, const char *p, Py_ssize_t n) {
    if (n > INT32_MAX - data->len) {
        return FALLBACK;
    }
    if (buf_put(data, p, n) < 0) {
        return -1;
    }
    return buf_put_i32(offsets, (int32_t)data->len);
}

static void mapcol_free(mapcol_t *c) {
    Py_CLEAR(c->offsets);
    buf_free(&c->key_offsets);
    buf_free(&c->key_data);
    buf_free(&c->value_offsets);
    buf_free(&c->value_data);
}

/* ---- reading a message (its properties: _columns_props.c) ---- */

static int int_of(PyObject *v, int64_t lo, int64_t hi, int64_t *out) {
    if (v == NULL || !PyLong_CheckExact(v)) {
        return FALLBACK;
    }
    int overflow;
    long long x = PyLong_AsLongLongAndOverflow(v, &overflow);
    if (x == -1 && PyErr_Occurred()) {
        return -1;
    }
    if (overflow || x < lo || x > hi) {
        return FALLBACK;
    }
    *out = (int64_t)x;
    return 0;
}
/* ---- the batch ---- */

typedef struct {
    Py_ssize_t rows;
    varcol_t topic, broker, msg_id, keys, tags, body;
    mapcol_t props;
    PyObject *queue_id, *queue_offset, *born, *store, *reconsume; /* fixed width, bytes */
} columns_t;

/* One (queue, messages) pair as read before any row: the override is owned here. */
typedef struct {
    PyObject *msgs; /* list or tuple, new reference */
    Py_ssize_t len;
    PyObject *broker; /* str or NULL (from each message) */
    int32_t queue_id;
} part_t;

static void columns_free(columns_t *c) {
    varcol_free(&c->topic);
    varcol_free(&c->broker);
    varcol_free(&c->msg_id);
    varcol_free(&c->keys);
    varcol_free(&c->tags);
    varcol_free(&c->body);
    mapcol_free(&c->props);
    Py_CLEAR(c->queue_id);
    Py_CLEAR(c->queue_offset);
    Py_CLEAR(c->born);
    Py_CLEAR(c->store);
    Py_CLEAR(c->reconsume);
}

static int columns_init(columns_t *c, Py_ssize_t rows) {
    memset(c, 0, sizeof *c);
    c->rows = rows;
    if (varcol_init(&c->topic, rows, 0) < 0 || varcol_init(&c->broker, rows, 0) < 0 ||
        varcol_init(&c->msg_id, rows, 1) < 0 || varcol_init(&c->keys, rows, 1) < 0 ||
        varcol_init(&c->tags, rows, 1) < 0 || varcol_init(&c->body, rows, 0) < 0) {
        return -1;
    }
    c->props.offsets = PyBytes_FromStringAndSize(NULL, (rows + 1) * 4);
    c->queue_id = PyBytes_FromStringAndSize(NULL, rows * 4);
    c->queue_offset = PyBytes_FromStringAndSize(NULL, rows * 8);
    c->born = PyBytes_FromStringAndSize(NULL, rows * 8);
    c->store = PyBytes_FromStringAndSize(NULL, rows * 8);
    c->reconsume = PyBytes_FromStringAndSize(NULL, rows * 4);
    if (!c->props.offsets || !c->queue_id || !c->queue_offset || !c->born || !c->store ||
        !c->reconsume) {
        return -1;
    }
    ((int32_t *)PyBytes_AS_STRING(c->props.offsets))[0] = 0;
    c->props.key_offsets.rows = c->props.key_data.rows = rows;
    c->props.value_offsets.rows = c->props.value_data.rows = rows;
    if (buf_put_i32(&c->props.key_offsets, 0) < 0 || buf_put_i32(&c->props.value_offsets, 0) < 0) {
        return -1;
    }
    return 0;
}

#define CHECK(expr)                                                                                \
    do {                                                                                           \
        int rc_ = (expr);                                                                          \
        if (rc_ != 0) {                                                                            \
            return rc_;                                                                            \
        }                                                                                          \
    } while (0)

/* The properties' columns of row i: msg_id (UNIQ_KEY), keys, tags and the map. */
static int put_properties(columns_t *c, Py_ssize_t i, const entries_t *e) {
    const char *uniq = NULL, *keys = NULL, *tags = NULL;
    Py_ssize_t uniq_n = 0, keys_n = 0, tags_n = 0;
    mapcol_t *map = &c->props;
    for (Py_ssize_t j = 0; j < e->len; j++) {
        const entry_t *it = &e->items[j];
        const name_t *name = name_of(it->key, it->key_len);
        if (name != NULL) {
            if (name->role == ROLE_UNIQ) {
                uniq = it->value;
                uniq_n = it->value_len;
            } else if (name->role == ROLE_KEYS) {
                keys = it->value;
                keys_n = it->value_len;
            } else if (name->role == ROLE_TAGS) {
                tags = it->value;
                tags_n = it->value_len;
            }
        }
        if (name == NULL || !name->hidden) {
            CHECK(string_put(&map->key_offsets, &map->key_data, it->key, it->key_len));
            CHECK(string_put(&map->value_offsets, &map->value_data, it->value, it->value_len));
            if (++map->entries > INT32_MAX) {
                return FALLBACK;
            }
        }
    }
    ((int32_t *)PyBytes_AS_STRING(map->offsets))[i + 1] = (int32_t)map->entries;
    CHECK(varcol_put(&c->msg_id, i, uniq, uniq_n));
    CHECK(varcol_put(&c->keys, i, keys, keys_n));
    return varcol_put(&c->tags, i, tags, tags_n);
}

static int put_row(columns_t *c, Py_ssize_t i, PyObject *m, const part_t *part, entries_t *e) {
    if (Py_TYPE(m) != ext_type) {
        return FALLBACK;
    }
    const char *p;
    Py_ssize_t n;
    int64_t v;
    CHECK(col_utf8_of(slot(m, S_TOPIC), &p, &n));
    CHECK(varcol_put(&c->topic, i, p, n));
    CHECK(col_utf8_of(part->broker ? part->broker : slot(m, S_BROKER_NAME), &p, &n));
    CHECK(varcol_put(&c->broker, i, p, n));
    if (part->broker) {
        v = part->queue_id;
    } else {
        CHECK(int_of(slot(m, S_QUEUE_ID), INT32_MIN, INT32_MAX, &v));
    }
    ((int32_t *)PyBytes_AS_STRING(c->queue_id))[i] = (int32_t)v;
    CHECK(int_of(slot(m, S_QUEUE_OFFSET), INT64_MIN, INT64_MAX, &v));
    ((int64_t *)PyBytes_AS_STRING(c->queue_offset))[i] = v;
    /* Milliseconds to microseconds wrap around as pyarrow.compute.multiply does. */
    CHECK(int_of(slot(m, S_BORN_TIMESTAMP), INT64_MIN, INT64_MAX, &v));
    ((int64_t *)PyBytes_AS_STRING(c->born))[i] = (int64_t)((uint64_t)v * 1000u);
    CHECK(int_of(slot(m, S_STORE_TIMESTAMP), INT64_MIN, INT64_MAX, &v));
    ((int64_t *)PyBytes_AS_STRING(c->store))[i] = (int64_t)((uint64_t)v * 1000u);
    CHECK(int_of(slot(m, S_RECONSUME_TIMES), INT32_MIN, INT32_MAX, &v));
    ((int32_t *)PyBytes_AS_STRING(c->reconsume))[i] = (int32_t)v;
    PyObject *body = slot(m, S_BODY);
    if (body == NULL || !PyBytes_CheckExact(body)) {
        return FALLBACK;
    }
    CHECK(varcol_put(&c->body, i, PyBytes_AS_STRING(body), PyBytes_GET_SIZE(body)));
    PyObject *hold = NULL;
    int rc = col_read_properties(m, e, &hold);
    if (rc == 0) {
        rc = put_properties(c, i, e);
    }
    Py_XDECREF(hold);
    return rc;
}

/* Reads the pairs and their queue overrides (the only Python code this module runs). */
static int read_parts(PyObject *batches, part_t *parts, Py_ssize_t *rows) {
    Py_ssize_t count = PyTuple_GET_SIZE(batches);
    *rows = 0;
    for (Py_ssize_t b = 0; b < count; b++) {
        PyObject *pair = PyTuple_GET_ITEM(batches, b);
        if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
            return FALLBACK;
        }
        PyObject *queue = PyTuple_GET_ITEM(pair, 0), *msgs = PyTuple_GET_ITEM(pair, 1);
        if (!PyList_CheckExact(msgs) && !PyTuple_CheckExact(msgs)) {
            return FALLBACK;
        }
        Py_INCREF(msgs);
        parts[b].msgs = msgs;
        parts[b].len = PySequence_Fast_GET_SIZE(msgs);
        *rows += parts[b].len;
        if (queue == Py_None) {
            continue;
        }
        PyObject *broker = PyObject_GetAttrString(queue, "broker_name");
        if (broker == NULL) {
            return -1;
        }
        parts[b].broker = broker;
        if (!PyUnicode_CheckExact(broker)) {
            return FALLBACK;
        }
        PyObject *qid = PyObject_GetAttrString(queue, "queue_id");
        if (qid == NULL) {
            return -1;
        }
        int64_t v;
        int rc = int_of(qid, INT32_MIN, INT32_MAX, &v);
        Py_DECREF(qid);
        CHECK(rc);
        parts[b].queue_id = (int32_t)v;
    }
    return 0;
}

static PyObject *varcol_result(varcol_t *c) {
    PyObject *data = buf_bytes(&c->data);
    if (data == NULL) {
        return NULL;
    }
    return Py_BuildValue("(OnOO)", c->valid ? c->valid : Py_None, c->nulls, c->offsets, data);
}

static PyObject *result_of(columns_t *c) {
    mapcol_t *m = &c->props;
    PyObject *items[] = {
        varcol_result(&c->topic),
        varcol_result(&c->broker),
        varcol_result(&c->msg_id),
        varcol_result(&c->keys),
        varcol_result(&c->tags),
        varcol_result(&c->body),
        buf_bytes(&m->key_offsets),
        buf_bytes(&m->key_data),
        buf_bytes(&m->value_offsets),
        buf_bytes(&m->value_data),
    };
    const Py_ssize_t n_items = (Py_ssize_t)(sizeof items / sizeof items[0]);
    PyObject *out = NULL;
    for (Py_ssize_t k = 0; k < n_items; k++) {
        if (items[k] == NULL) {
            goto done;
        }
    }
    out = Py_BuildValue("(nOOOOOOOOOOO(OnOOOO))", c->rows, items[0], items[1], c->queue_id,
                        c->queue_offset, items[2], items[3], items[4], items[5], c->born, c->store,
                        c->reconsume, m->offsets, m->entries, items[6], items[7], items[8],
                        items[9]);
done:
    for (Py_ssize_t k = 0; k < n_items; k++) {
        Py_XDECREF(items[k]);
    }
    return out;
}

static PyObject *build(PyObject *self, PyObject *batches) {
    if (ext_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_columns.configure was not called");
        return NULL;
    }
    /* A tuple: no queue attribute read below can change which pairs there are. */
    if (!PyTuple_CheckExact(batches)) {
        Py_RETURN_NONE;
    }
    Py_ssize_t count = PyTuple_GET_SIZE(batches);
    part_t *parts = PyMem_Calloc((size_t)(count ? count : 1), sizeof(part_t));
    if (parts == NULL) {
        return PyErr_NoMemory();
    }
    columns_t c;
    entries_t e = {NULL, 0, 0};
    PyObject *out = NULL;
    Py_ssize_t rows;
    memset(&c, 0, sizeof c);
    int rc = read_parts(batches, parts, &rows);
    if (rc == 0) {
        rc = columns_init(&c, rows);
    }
    Py_ssize_t i = 0;
    for (Py_ssize_t b = 0; b < count && rc == 0; b++) {
        /* Nothing above ran after the lengths were read, but a queue attribute could have. */
        if (PySequence_Fast_GET_SIZE(parts[b].msgs) != parts[b].len) {
            rc = FALLBACK;
            break;
        }
        PyObject **items = PySequence_Fast_ITEMS(parts[b].msgs);
        for (Py_ssize_t k = 0; k < parts[b].len && rc == 0; k++) {
            rc = put_row(&c, i++, items[k], &parts[b], &e);
        }
    }
    if (rc == 0) {
        out = result_of(&c);
    } else if (rc == FALLBACK) {
        out = Py_NewRef(Py_None);
    } else if (PyErr_ExceptionMatches(PyExc_Exception) && !PyErr_ExceptionMatches(PyExc_MemoryError)) {
        /* An attribute that raised: the Python builder meets it again and reports it. */
        PyErr_Clear();
        out = Py_NewRef(Py_None);
    }
    for (Py_ssize_t b = 0; b < count; b++) {
        Py_XDECREF(parts[b].msgs);
        Py_XDECREF(parts[b].broker);
    }
    PyMem_Free(parts);
    PyMem_Free(e.items);
    columns_free(&c);
    return out;
}
static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *descriptors, *uniq, *keys, *tags, *hidden;
    if (!PyArg_ParseTuple(args, "O!O!UUUO!", &PyType_Type, &type, &PyTuple_Type, &descriptors,
                          &uniq, &keys, &tags, &PyTuple_Type, &hidden)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(descriptors) != N_SLOTS) {
        PyErr_Format(PyExc_ValueError, "expected %d slot descriptors", N_SLOTS);
        return NULL;
    }
    /* Unusable until configured in full. */
    Py_CLEAR(ext_type);
    if (rmqk_slot_offsets((PyTypeObject *)type, descriptors, col_slot_offsets, N_SLOTS) < 0) {
        return NULL;
    }
    col_n_names = 0;
    col_name_lengths = 0;
    if (col_add_name(uniq, ROLE_UNIQ, 0) < 0 || col_add_name(keys, ROLE_KEYS, 0) < 0 ||
        col_add_name(tags, ROLE_TAGS, 0) < 0) {
        return NULL;
    }
    for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(hidden); i++) {
        if (col_add_name(PyTuple_GET_ITEM(hidden, i), ROLE_NONE, 1) < 0) {
            return NULL;
        }
    }
    Py_INCREF(type);
    ext_type = (PyTypeObject *)type;
    Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(type, slot_descriptors, uniq_key, keys, tags, excluded_names)"},
    {"build", build, METH_O, "build(batches) -> column buffers, or None for the Python builder"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_columns", "Arrow column buffers of consumed messages.", -1, methods,
};

PyMODINIT_FUNC PyInit__columns(void) { return PyModule_Create(&module); }
