/*
 * Optional compiled JSON header encoder and decoder (rmqk.wire.frame).
 *
 * A pull sends one request header and reads one response header, about a fifth of
 * the Python work of a pull at 32 messages. Both functions take the common case
 * only and return None for anything else; frame.py's Python code, the reference,
 * then does the work, so its output and its errors stay the only ones there are.
 * tests/test_speedups.py compares the two on random and hostile input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <stdio.h>
#include <string.h>

/*
 * The JSON header of a request (frame._json_header), for the common case only:
 * exact ints within int32, an exact dict of exact str, a remark that is None or an
 * exact str. Anything else (and text that is not UTF-8 encodable) returns None and
 * frame.py's Python encoder, the reference, writes it or raises its error. Strings
 * are escaped as json.encoder.encode_basestring does (ensure_ascii=False).
 */
typedef struct {
    char *data;
    Py_ssize_t len;
    Py_ssize_t cap;
} Buf;

static int buf_reserve(Buf *b, Py_ssize_t extra) {
    if (b->len + extra <= b->cap) {
        return 0;
    }
    Py_ssize_t cap = b->cap * 2;
    if (cap < b->len + extra) {
        cap = b->len + extra;
    }
    char *data = PyMem_Realloc(b->data, (size_t)cap);
    if (data == NULL) {
        PyErr_NoMemory();
        return -1;
    }
    b->data = data;
    b->cap = cap;
    return 0;
}

static int buf_put(Buf *b, const char *text, Py_ssize_t size) {
    if (buf_reserve(b, size) < 0) {
        return -1;
    }
    memcpy(b->data + b->len, text, (size_t)size);
    b->len += size;
    return 0;
}

/* 1 written, 0 not the common case (caller returns None), -1 error. */
static int buf_json_str(Buf *b, PyObject *obj) {
    if (!PyUnicode_CheckExact(obj)) {
        return 0;
    }
    Py_ssize_t size;
    const char *utf8 = PyUnicode_AsUTF8AndSize(obj, &size);
    if (utf8 == NULL) {
        /* Lone surrogates: the Python encoder words the error. */
        if (PyErr_ExceptionMatches(PyExc_UnicodeEncodeError)) {
            PyErr_Clear();
            return 0;
        }
        return -1;
    }
    /* At worst every byte becomes \u00XX. */
    if (buf_reserve(b, size * 6 + 2) < 0) {
        return -1;
    }
    static const char hex[] = "0123456789abcdef";
    char *out = b->data + b->len;
    *out++ = '"';
    for (Py_ssize_t i = 0; i < size; i++) {
        unsigned char c = (unsigned char)utf8[i];
        if (c >= 0x20 && c != '"' && c != '\\') {
            *out++ = (char)c;
            continue;
        }
        *out++ = '\\';
        switch (c) {
        case '"': *out++ = '"'; break;
        case '\\': *out++ = '\\'; break;
        case '\b': *out++ = 'b'; break;
        case '\f': *out++ = 'f'; break;
        case '\n': *out++ = 'n'; break;
        case '\r': *out++ = 'r'; break;
        case '\t': *out++ = 't'; break;
        default:
            *out++ = 'u';
            *out++ = '0';
            *out++ = '0';
            *out++ = hex[c >> 4];
            *out++ = hex[c & 15];
        }
    }
    *out++ = '"';
    b->len = out - b->data;
    return 1;
}

/* 1 written, 0 not an exact int32, -1 error. */
static int buf_int32(Buf *b, PyObject *obj) {
    if (!PyLong_CheckExact(obj)) {
        return 0;
    }
    int overflow;
    long long value = PyLong_AsLongLongAndOverflow(obj, &overflow);
    if (overflow || value < INT32_MIN || value > INT32_MAX) {
        return 0;
    }
    if (value == -1 && PyErr_Occurred()) {
        return -1;
    }
    char text[16];
    int size = snprintf(text, sizeof text, "%lld", value);
    return buf_put(b, text, size) < 0 ? -1 : 1;
}

#define PUT_LIT(b, s) buf_put((b), (s), (Py_ssize_t)(sizeof(s) - 1))

static int json_header_into(Buf *b, PyObject *code, PyObject *fields, PyObject *flag,
                            PyObject *language, PyObject *opaque, PyObject *remark,
                            PyObject *version) {
    int ok;
    if (!PyDict_CheckExact(fields)) {
        return 0;
    }
    if (PUT_LIT(b, "{\"code\":") < 0) return -1;
    if ((ok = buf_int32(b, code)) != 1) return ok;
    if (PUT_LIT(b, ",\"extFields\":{") < 0) return -1;
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    int first = 1;
    while (PyDict_Next(fields, &pos, &key, &value)) {
        if (!first && PUT_LIT(b, ",") < 0) return -1;
        first = 0;
        if ((ok = buf_json_str(b, key)) != 1) return ok;
        if (PUT_LIT(b, ":") < 0) return -1;
        if ((ok = buf_json_str(b, value)) != 1) return ok;
    }
    if (PUT_LIT(b, "},\"flag\":") < 0) return -1;
    if ((ok = buf_int32(b, flag)) != 1) return ok;
    if (PUT_LIT(b, ",\"language\":") < 0) return -1;
    if ((ok = buf_json_str(b, language)) != 1) return ok;
    if (PUT_LIT(b, ",\"opaque\":") < 0) return -1;
    if ((ok = buf_int32(b, opaque)) != 1) return ok;
    if (remark != Py_None) {
        if (PUT_LIT(b, ",\"remark\":") < 0) return -1;
        if ((ok = buf_json_str(b, remark)) != 1) return ok;
    }
    if (PUT_LIT(b, ",\"serializeTypeCurrentRPC\":\"JSON\",\"version\":") < 0) return -1;
    if ((ok = buf_int32(b, version)) != 1) return ok;
    return PUT_LIT(b, "}") < 0 ? -1 : 1;
}

static PyObject *json_header(PyObject *self, PyObject *const *args, Py_ssize_t nargs) {
    if (nargs != 7) {
        PyErr_SetString(PyExc_TypeError, "json_header takes 7 arguments");
        return NULL;
    }
    /* A pull request's header is about 400 bytes. */
    Buf b = {PyMem_Malloc(512), 0, 512};
    if (b.data == NULL) {
        return PyErr_NoMemory();
    }
    int ok = json_header_into(&b, args[0], args[1], args[2], args[3], args[4], args[5],
                              args[6]);
    PyObject *result;
    if (ok == 1) {
        result = PyBytes_FromStringAndSize(b.data, b.len);
    } else if (ok == 0) {
        result = Py_NewRef(Py_None);
    } else {
        result = NULL;
    }
    PyMem_Free(b.data);
    return result;
}

/*
 * The JSON header of a response (frame._decode_json_header), for the plain case
 * only: an object of the known fields, ints without fraction or exponent within
 * int32, strings without escapes or control characters, extFields an object of such
 * strings,
 * each field at most once. Anything else returns None and the Python decoder, the
 * reference, decodes it or says what is wrong with it.
 */
typedef struct {
    const unsigned char *p;
    const unsigned char *end;
} Cur;

static void skip_ws(Cur *c) {
    while (c->p < c->end && (*c->p == ' ' || *c->p == '\t' || *c->p == '\n' || *c->p == '\r')) {
        c->p++;
    }
}

static int expect(Cur *c, unsigned char ch) {
    skip_ws(c);
    if (c->p < c->end && *c->p == ch) {
        c->p++;
        return 1;
    }
    return 0;
}

/* The raw bytes of a string without escapes or control characters; 0 if not one. */
static int raw_str(Cur *c, const unsigned char **start, Py_ssize_t *size) {
    skip_ws(c);
    if (c->p >= c->end || *c->p != '"') {
        return 0;
    }
    const unsigned char *s = ++c->p;
    while (c->p < c->end && *c->p != '"') {
        if (*c->p < 0x20 || *c->p == '\\') {
            return 0;
        }
        c->p++;
    }
    if (c->p >= c->end) {
        return 0;
    }
    *start = s;
    *size = c->p - s;
    c->p++;
    return 1;
}

/* A new str, NULL with no error set when not the plain case, NULL with one on failure. */
static PyObject *str_value(Cur *c) {
    const unsigned char *s;
    Py_ssize_t size;
    if (!raw_str(c, &s, &size)) {
        return NULL;
    }
    PyObject *text = PyUnicode_DecodeUTF8((const char *)s, size, NULL);
    if (text == NULL && PyErr_ExceptionMatches(PyExc_UnicodeDecodeError)) {
        PyErr_Clear();
    }
    return text;
}

static int is_null(Cur *c) {
    skip_ws(c);
    if (c->end - c->p >= 4 && memcmp(c->p, "null", 4) == 0) {
        c->p += 4;
        return 1;
    }
    return 0;
}

/* A new int within int32 written as JSON writes an integer, else NULL (no error). */
static PyObject *int_value(Cur *c) {
    skip_ws(c);
    int negative = 0;
    if (c->p < c->end && *c->p == '-') {
        negative = 1;
        c->p++;
    }
    const unsigned char *digits = c->p;
    long long value = 0;
    while (c->p < c->end && *c->p >= '0' && *c->p <= '9' && c->p - digits < 11) {
        value = value * 10 + (*c->p - '0');
        c->p++;
    }
    Py_ssize_t n = c->p - digits;
    if (n == 0 || n > 10 || (n > 1 && *digits == '0')) {
        return NULL;
    }
    if (c->p < c->end && (*c->p == '.' || *c->p == 'e' || *c->p == 'E' || (*c->p >= '0' && *c->p <= '9'))) {
        return NULL;
    }
    if (negative) {
        value = -value;
    }
    if (value < INT32_MIN || value > INT32_MAX) {
        return NULL;
    }
    return PyLong_FromLongLong(value);
}

/* 1 parsed into fields, 0 not the plain case, -1 error. */
static int ext_fields_into(Cur *c, PyObject *fields) {
    if (!expect(c, '{')) {
        return 0;
    }
    if (expect(c, '}')) {
        return 1;
    }
    for (;;) {
        PyObject *key = str_value(c);
        if (key == NULL) {
            return PyErr_Occurred() ? -1 : 0;
        }
        if (!expect(c, ':')) {
            Py_DECREF(key);
            return 0;
        }
        /* A null (an absent field in Python's reading) is left to Python: with
         * repeated keys its field order is the first occurrence's. */
        PyObject *value = str_value(c);
        if (value == NULL) {
            Py_DECREF(key);
            return PyErr_Occurred() ? -1 : 0;
        }
        int status = PyDict_SetItem(fields, key, value);
        Py_DECREF(value);
        Py_DECREF(key);
        if (status < 0) {
            return -1;
        }
        if (expect(c, '}')) {
            return 1;
        }
        if (!expect(c, ',')) {
            return 0;
        }
    }
}

enum { F_CODE, F_EXT, F_FLAG, F_LANGUAGE, F_OPAQUE, F_REMARK, F_SERIALIZE, F_VERSION, N_FIELDS };

static int field_index(const unsigned char *s, Py_ssize_t n) {
    static const char *const names[N_FIELDS] = {
        "code", "extFields", "flag", "language", "opaque", "remark",
        "serializeTypeCurrentRPC", "version",
    };
    for (int i = 0; i < N_FIELDS; i++) {
        if ((Py_ssize_t)strlen(names[i]) == n && memcmp(names[i], s, (size_t)n) == 0) {
            return i;
        }
    }
    return -1;
}

/* 1 parsed, 0 not the plain case, -1 error; values[] hold new references. */
static int header_fields(Cur *c, PyObject **values) {
    if (!expect(c, '{')) {
        return 0;
    }
    if (expect(c, '}')) {
        return 1;
    }
    for (;;) {
        const unsigned char *name;
        Py_ssize_t size;
        if (!raw_str(c, &name, &size) || !expect(c, ':')) {
            return 0;
        }
        int index = field_index(name, size);
        if (index < 0 || values[index] != NULL) {
            return 0;
        }
        PyObject *value = NULL;
        switch (index) {
        case F_EXT:
            value = PyDict_New();
            if (value == NULL) {
                return -1;
            }
            values[index] = value;
            if (is_null(c)) {
                break;
            }
            {
                int ok = ext_fields_into(c, value);
                if (ok != 1) {
                    return ok;
                }
            }
            break;
        case F_LANGUAGE:
            skip_ws(c);
            value = (c->p < c->end && *c->p == '"') ? str_value(c) : int_value(c);
            break;
        case F_REMARK:
            value = is_null(c) ? Py_NewRef(Py_None) : str_value(c);
            break;
        case F_SERIALIZE:
            value = str_value(c);
            break;
        default:
            value = int_value(c);
        }
        if (index != F_EXT) {
            if (value == NULL) {
                return PyErr_Occurred() ? -1 : 0;
            }
            values[index] = value;
        }
        if (expect(c, '}')) {
            skip_ws(c);
            return c->p == c->end ? 1 : 0;
        }
        if (!expect(c, ',')) {
            return 0;
        }
    }
}

static PyObject *decode_json_header(PyObject *self, PyObject *arg) {
    if (!PyBytes_CheckExact(arg)) {
        PyErr_SetString(PyExc_TypeError, "decode_json_header takes bytes");
        return NULL;
    }
    Cur c = {(const unsigned char *)PyBytes_AS_STRING(arg),
             (const unsigned char *)PyBytes_AS_STRING(arg) + PyBytes_GET_SIZE(arg)};
    PyObject *values[N_FIELDS] = {NULL};
    int ok = header_fields(&c, values);
    PyObject *result = NULL;
    if (ok == 1 && values[F_CODE] != NULL) {
        /* code, ext_fields, flag, language, opaque, remark, version; defaults as Python's. */
        static const int order[] = {F_CODE, F_EXT, F_FLAG, F_LANGUAGE, F_OPAQUE, F_REMARK, F_VERSION};
        result = PyTuple_New(7);
        for (int i = 0; result != NULL && i < 7; i++) {
            PyObject *value = values[order[i]];
            if (value == NULL) {
                if (order[i] == F_EXT) {
                    value = PyDict_New();
                    if (value == NULL) {
                        Py_CLEAR(result);
                        break;
                    }
                } else if (order[i] == F_LANGUAGE || order[i] == F_REMARK) {
                    value = Py_NewRef(Py_None);
                } else {
                    value = PyLong_FromLong(0);
                }
            } else {
                values[order[i]] = NULL;
            }
            PyTuple_SET_ITEM(result, i, value);
        }
    } else if (ok >= 0) {
        result = Py_NewRef(Py_None);
    }
    for (int i = 0; i < N_FIELDS; i++) {
        Py_XDECREF(values[i]);
    }
    return result;
}

static PyMethodDef methods[] = {
    {"json_header", (PyCFunction)(void (*)(void))json_header, METH_FASTCALL,
     "json_header(code, ext_fields, flag, language, opaque, remark, version) -> bytes | None"},
    {"decode_json_header", decode_json_header, METH_O,
     "decode_json_header(header) -> (code, ext_fields, flag, language, opaque, remark, version)"
     " | None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_headers",
    "Optional compiled JSON header codec; frame.py falls back to Python without it.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__headers(void) {
    return PyModule_Create(&module);
}
