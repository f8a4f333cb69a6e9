/*
 * Optional compiled decoder for stored message records (rmqk.wire.message_codec).
 *
 * Only the well-formed case is handled here: a record whose lengths add up, whose
 * hosts have a text and whose body (if compressed) inflates. At the first record
 * that is anything else, decoding stops and returns that record's offset, and the
 * pure-Python decoder takes over from it, so every error (its text, its index,
 * whether it is "framed") comes from one place. The Python decoder stays the
 * reference; tests compare the two on the same inputs, well-formed or not.
 *
 * MessageExt's slots are written through the offsets of its member descriptors,
 * which message_codec hands over once (configure), in the order of SLOT_NAMES.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "_slot_offsets.h"

enum {
    S_STORE_SIZE,
    S_BODY_CRC,
    S_QUEUE_ID,
    S_FLAG,
    S_QUEUE_OFFSET,
    S_COMMIT_LOG_OFFSET,
    S_SYS_FLAG,
    S_BORN_TIMESTAMP,
    S_BORN_HOST,
    S_STORE_TIMESTAMP,
    S_STORE_HOST,
    S_RECONSUME_TIMES,
    S_PREPARED_OFFSET,
    S_BODY,
    S_TOPIC,
    S_BROKER_NAME,
    S_PROPS_RAW,
    S_PROPS,
    S_QUEUE_BOUNDS,
    N_SLOTS
};

#define MAGIC_V1 ((int32_t)0xDAA320A7)
#define MAGIC_V2 ((int32_t)0xDAA320AB)
#define PREFIX_V4 88 /* through the body length, IPv4 hosts */
#define MIN_RECORD (PREFIX_V4 + 1 + 2)

static PyTypeObject *ext_type = NULL;
static Py_ssize_t slot_offsets[N_SLOTS];
static PyObject *host_texts = NULL; /* dict: raw host bytes -> text */
static PyObject *host_text_fn = NULL;
static PyObject *inflate_fn = NULL;
static PyObject *empty_bytes = NULL;

static inline int32_t rd32(const unsigned char *p) {
    return (int32_t)(((uint32_t)p[0] << 24) | ((uint32_t)p[1] << 16) | ((uint32_t)p[2] << 8) |
                     (uint32_t)p[3]);
}

static inline int64_t rd64(const unsigned char *p) {
    return (int64_t)(((uint64_t)(uint32_t)rd32(p) << 32) | (uint64_t)(uint32_t)rd32(p + 4));
}

static inline int16_t rd16(const unsigned char *p) {
    return (int16_t)(((uint16_t)p[0] << 8) | (uint16_t)p[1]);
}

/* Stores a new reference (stolen) in a slot of a fresh object; NULL means an error is set. */
static inline int put(PyObject *obj, int slot, PyObject *value) {
    if (value == NULL) {
        return -1;
    }
    *(PyObject **)((char *)obj + slot_offsets[slot]) = value;
    return 0;
}

/* The text of a raw host (ip + port bytes); NULL with no error set when Python should decide. */
static PyObject *host_of(const unsigned char *raw, Py_ssize_t len) {
    PyObject *key = PyBytes_FromStringAndSize((const char *)raw, len);
    if (key == NULL) {
        return NULL;
    }
    PyObject *text = PyDict_GetItemWithError(host_texts, key);
    if (text != NULL && PyObject_IsTrue(text) == 1) {
        Py_INCREF(text);
        Py_DECREF(key);
        return text;
    }
    if (PyErr_Occurred()) {
        Py_DECREF(key);
        return NULL;
    }
    text = PyObject_CallOneArg(host_text_fn, key);
    Py_DECREF(key);
    return text;
}

/* Clears an ordinary exception (the Python decoder will meet it again and report it). */
static int recoverable(void) {
    if (PyErr_ExceptionMatches(PyExc_Exception)) {
        PyErr_Clear();
        return 1;
    }
    return 0;
}

static PyObject *configure(PyObject *self, PyObject *args) {
    PyObject *type, *descriptors, *texts, *text_fn, *inflate;
    if (!PyArg_ParseTuple(args, "O!O!O!OO", &PyType_Type, &type, &PyTuple_Type, &descriptors,
                          &PyDict_Type, &texts, &text_fn, &inflate)) {
        return NULL;
    }
    if (PyTuple_GET_SIZE(descriptors) != N_SLOTS) {
        PyErr_Format(PyExc_ValueError, "expected %d slot descriptors", N_SLOTS);
        return NULL;
    }
    if (rmqk_slot_offsets((PyTypeObject *)type, descriptors, slot_offsets, N_SLOTS) < 0) {
        return NULL;
    }
    Py_INCREF(type);
    Py_XSETREF(ext_type, (PyTypeObject *)type);
    Py_INCREF(texts);
    Py_XSETREF(host_texts, texts);
    Py_INCREF(text_fn);
    Py_XSETREF(host_text_fn, text_fn);
    Py_INCREF(inflate);
    Py_XSETREF(inflate_fn, inflate);
    Py_RETURN_NONE;
}

/*
 * decode_records(buf: bytes, off, end, broker_name, decompress, max_body, out: list) -> int
 *
 * Appends a MessageExt per record of buf[off:end] to out; returns the offset it
 * stopped at: end, or the start of a record left to the Python decoder.
 */
static PyObject *decode_records(PyObject *self, PyObject *args) {
    PyObject *buf, *broker_name, *out;
    Py_ssize_t off, end, max_body;
    int decompress;
    if (!PyArg_ParseTuple(args, "O!nnOpnO!", &PyBytes_Type, &buf, &off, &end, &broker_name,
                          &decompress, &max_body, &PyList_Type, &out)) {
        return NULL;
    }
    if (ext_type == NULL) {
        PyErr_SetString(PyExc_RuntimeError, "_speedups.configure was not called");
        return NULL;
    }
    const unsigned char *data = (const unsigned char *)PyBytes_AS_STRING(buf);
    if (end > PyBytes_GET_SIZE(buf)) {
        end = PyBytes_GET_SIZE(buf);
    }
    /* Records of one pull share their topic and hosts: keep the last ones. */
    const unsigned char *last_topic_raw = NULL, *last_born_raw = NULL, *last_store_raw = NULL;
    Py_ssize_t last_topic_len = -1, last_born_len = 0, last_store_len = 0;
    PyObject *topic = NULL, *born = NULL, *store = NULL;
    PyObject *result = NULL;

    while (off < end) {
        if (end - off < MIN_RECORD) {
            break;
        }
        const unsigned char *r = data + off;
        int32_t total = rd32(r);
        if (total < MIN_RECORD || total > end - off) {
            break;
        }
        Py_ssize_t stop = off + total;
        int32_t magic = rd32(r + 4);
        int32_t sys_flag = rd32(r + 36);
        Py_ssize_t born_len = (sys_flag & 0x10) ? 20 : 8;
        Py_ssize_t store_len = (sys_flag & 0x20) ? 20 : 8;
        Py_ssize_t born_at = off + 48;
        Py_ssize_t store_ts_at = born_at + born_len;
        Py_ssize_t store_at = store_ts_at + 8;
        Py_ssize_t tail_at = store_at + store_len; /* reconsume, prepared offset, body length */
        Py_ssize_t pos = tail_at + 16;
        if (pos > stop) {
            break;
        }
        int32_t body_len = rd32(data + tail_at + 12);
        if (body_len < 0 || body_len > stop - pos) {
            break;
        }
        Py_ssize_t body_at = pos;
        pos += body_len;
        Py_ssize_t topic_len;
        if (magic == MAGIC_V1) {
            if (pos + 1 > stop) {
                break;
            }
            topic_len = data[pos];
            if (topic_len > 127) {
                break;
            }
            pos += 1;
        } else if (magic == MAGIC_V2) {
            if (pos + 2 > stop) {
                break;
            }
            topic_len = rd16(data + pos);
            if (topic_len < 0) {
                break;
            }
            pos += 2;
        } else {
            break;
        }
        Py_ssize_t topic_at = pos;
        if (topic_len > stop - pos - 2) {
            break;
        }
        pos += topic_len;
        Py_ssize_t props_len = rd16(data + pos);
        pos += 2;
        if (props_len < 0 || pos + props_len != stop) {
            break;
        }

        /* The lengths add up: everything below either succeeds or leaves this record. */
        PyObject *body = PyBytes_FromStringAndSize((const char *)data + body_at, body_len);
        if (body == NULL) {
            goto error;
        }
        if ((sys_flag & 0x1) && decompress) {
            PyObject *inflated = PyObject_CallFunction(inflate_fn, "Oin", body, (int)sys_flag,
                                                       max_body);
            Py_DECREF(body);
            if (inflated == NULL) {
                if (recoverable()) {
                    break;
                }
                goto error;
            }
            body = inflated;
        }
        if (topic_len != last_topic_len ||
            memcmp(data + topic_at, last_topic_raw, (size_t)topic_len) != 0) {
            PyObject *text = PyUnicode_DecodeUTF8((const char *)data + topic_at, topic_len,
                                                  "replace");
            if (text == NULL) {
                Py_DECREF(body);
                goto error;
            }
            Py_XSETREF(topic, text);
            last_topic_raw = data + topic_at;
            last_topic_len = topic_len;
        }
        if (born == NULL || born_len != last_born_len ||
            memcmp(data + born_at, last_born_raw, (size_t)born_len) != 0) {
            PyObject *text = host_of(data + born_at, born_len);
            if (text == NULL) {
                Py_DECREF(body);
                if (recoverable()) {
                    break;
                }
                goto error;
            }
            Py_XSETREF(born, text);
            last_born_raw = data + born_at;
            last_born_len = born_len;
        }
        if (store == NULL || store_len != last_store_len ||
            memcmp(data + store_at, last_store_raw, (size_t)store_len) != 0) {
            PyObject *text = host_of(data + store_at, store_len);
            if (text == NULL) {
                Py_DECREF(body);
                if (recoverable()) {
                    break;
                }
                goto error;
            }
            Py_XSETREF(store, text);
            last_store_raw = data + store_at;
            last_store_len = store_len;
        }

        PyObject *m = ext_type->tp_alloc(ext_type, 0);
        if (m == NULL) {
            Py_DECREF(body);
            goto error;
        }
        PyObject *props;
        if (props_len) {
            props = PyBytes_FromStringAndSize((const char *)data + pos, props_len);
        } else {
            props = Py_NewRef(empty_bytes);
        }
        /* A failed put leaves the slots set so far owned by m, which DECREF frees. */
        if (put(m, S_BODY, body) < 0 || put(m, S_PROPS_RAW, props) < 0 ||
            put(m, S_STORE_SIZE, PyLong_FromLong(total)) < 0 ||
            put(m, S_BODY_CRC, PyLong_FromLong(rd32(r + 8))) < 0 ||
            put(m, S_QUEUE_ID, PyLong_FromLong(rd32(r + 12))) < 0 ||
            put(m, S_FLAG, PyLong_FromLong(rd32(r + 16))) < 0 ||
            put(m, S_QUEUE_OFFSET, PyLong_FromLongLong(rd64(r + 20))) < 0 ||
            put(m, S_COMMIT_LOG_OFFSET, PyLong_FromLongLong(rd64(r + 28))) < 0 ||
            put(m, S_SYS_FLAG, PyLong_FromLong(sys_flag)) < 0 ||
            put(m, S_BORN_TIMESTAMP, PyLong_FromLongLong(rd64(r + 40))) < 0 ||
            put(m, S_BORN_HOST, Py_NewRef(born)) < 0 ||
            put(m, S_STORE_TIMESTAMP, PyLong_FromLongLong(rd64(data + store_ts_at))) < 0 ||
            put(m, S_STORE_HOST, Py_NewRef(store)) < 0 ||
            put(m, S_RECONSUME_TIMES, PyLong_FromLong(rd32(data + tail_at))) < 0 ||
            put(m, S_PREPARED_OFFSET, PyLong_FromLongLong(rd64(data + tail_at + 4))) < 0 ||
            put(m, S_TOPIC, Py_NewRef(topic)) < 0 ||
            put(m, S_BROKER_NAME, Py_NewRef(broker_name)) < 0 ||
            put(m, S_PROPS, Py_NewRef(Py_None)) < 0 ||
            put(m, S_QUEUE_BOUNDS, Py_NewRef(Py_None)) < 0) {
            Py_DECREF(m);
            goto error;
        }
        /* Every slot holds an atomic value (str, bytes, int, None), so m can be in no
           reference cycle: the cyclic GC need not track it. With hundreds of thousands of
           messages in flight (a sink's window) each full collection otherwise walks them all. */
        PyObject_GC_UnTrack(m);
        int appended = PyList_Append(out, m);
        Py_DECREF(m);
        if (appended < 0) {
            goto error;
        }
        off = stop;
    }
    result = PyLong_FromSsize_t(off);
error:
    Py_XDECREF(topic);
    Py_XDECREF(born);
    Py_XDECREF(store);
    return result;
}

static PyMethodDef methods[] = {
    {"configure", configure, METH_VARARGS,
     "configure(type, slot_descriptors, host_texts, host_text, inflate)"},
    {"decode_records", decode_records, METH_VARARGS,
     "decode_records(buf, off, end, broker_name, decompress, max_body, out) -> stop offset"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_speedups",
    "Optional compiled record decoder; message_codec falls back to Python without it.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__speedups(void) {
    empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
    if (empty_bytes == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
