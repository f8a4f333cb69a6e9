/*
 * A message's properties for the column builder (_columns.c): the raw text
 * parsed with parse_properties's rules, or the dict already parsed, each kept
 * property as pointers into text the message (or *hold) owns.
 */
#include "_columns.h"

Py_ssize_t col_slot_offsets[N_SLOTS];
name_t col_names[MAX_NAMES];
Py_ssize_t col_n_names = 0;
uint64_t col_name_lengths = 0;

/* A str's UTF-8 bytes (cached by the str itself); FALLBACK for anything else or surrogates. */
int col_utf8_of(PyObject *s, const char **p, Py_ssize_t *n) {
    if (s == NULL || !PyUnicode_CheckExact(s)) {
        return FALLBACK;
    }
    *p = PyUnicode_AsUTF8AndSize(s, n);
    if (*p == NULL) {
        if (PyErr_ExceptionMatches(PyExc_UnicodeError)) {
            PyErr_Clear();
            return FALLBACK;
        }
        return -1;
    }
    return 0;
}

/* Whether p[0:n] is well-formed UTF-8 (as Python's strict decoder and Arrow's cast judge it). */
static int valid_utf8(const unsigned char *p, Py_ssize_t n) {
    const unsigned char *end = p + n;
    while (p < end) {
        if (end - p >= 8) {
            uint64_t w;
            memcpy(&w, p, 8);
            if ((w & UINT64_C(0x8080808080808080)) == 0) {
                p += 8;
                continue;
            }
        }
        unsigned char c = *p;
        if (c < 0x80) {
            p++;
            continue;
        }
        Py_ssize_t need;
        unsigned char lo = 0x80, hi = 0xBF;
        if (c >= 0xC2 && c <= 0xDF) {
            need = 1;
        } else if (c >= 0xE0 && c <= 0xEF) {
            need = 2;
            if (c == 0xE0) {
                lo = 0xA0;
            } else if (c == 0xED) {
                hi = 0x9F;
            }
        } else if (c >= 0xF0 && c <= 0xF4) {
            need = 3;
            if (c == 0xF0) {
                lo = 0x90;
            } else if (c == 0xF4) {
                hi = 0x8F;
            }
        } else {
            return 0;
        }
        if (end - p <= need || p[1] < lo || p[1] > hi) {
            return 0;
        }
        for (Py_ssize_t k = 2; k <= need; k++) {
            if (p[k] < 0x80 || p[k] > 0xBF) {
                return 0;
            }
        }
        p += need + 1;
    }
    return 1;
}

static int entries_add(entries_t *e, const char *k, Py_ssize_t kn, const char *v, Py_ssize_t vn) {
    if (e->len == e->cap) {
        Py_ssize_t cap = e->cap ? e->cap * 2 : 32;
        entry_t *items = PyMem_Realloc(e->items, (size_t)cap * sizeof(entry_t));
        if (items == NULL) {
            PyErr_NoMemory();
            return -1;
        }
        e->items = items;
        e->cap = cap;
    }
    e->items[e->len++] = (entry_t){k, v, kn, vn};
    return 0;
}

/* parse_properties's rules: \x02-separated segments, the key up to the first \x01, both non-empty. */
static int parse_text(entries_t *e, const char *s, Py_ssize_t n) {
    const char *end = s + n;
    while (s < end) {
        const char *stop = memchr(s, 0x02, (size_t)(end - s));
        if (stop == NULL) {
            stop = end;
        }
        const char *sep = memchr(s, 0x01, (size_t)(stop - s));
        if (sep != NULL && sep > s && stop - sep > 1) {
            if (entries_add(e, s, sep - s, sep + 1, stop - sep - 1) < 0) {
                return -1;
            }
        }
        s = stop + 1;
    }
    return 0;
}

/*
 * Properties already parsed into a dict: what properties_text() would format and
 * the parse then keep, as long as no key or value holds a separator (which would
 * re-split them) and all are str.
 */
static int parse_dict(entries_t *e, PyObject *props) {
    Py_ssize_t pos = 0;
    PyObject *key, *value;
    while (PyDict_Next(props, &pos, &key, &value)) {
        if (value == Py_None) {
            continue;
        }
        const char *k, *v;
        Py_ssize_t kn, vn;
        int rc = col_utf8_of(key, &k, &kn);
        if (rc == 0) {
            rc = col_utf8_of(value, &v, &vn);
        }
        if (rc != 0) {
            return rc;
        }
        if (kn == 0 || vn == 0) {
            continue;
        }
        if (memchr(k, 0x01, (size_t)kn) || memchr(k, 0x02, (size_t)kn) ||
            memchr(v, 0x01, (size_t)vn) || memchr(v, 0x02, (size_t)vn)) {
            return FALLBACK;
        }
        if (entries_add(e, k, kn, v, vn) < 0) {
            return -1;
        }
    }
    return 0;
}

/*
 * The message's kept properties into e (reset first). *hold receives a text this
 * function made (bytes decoded with U+FFFD), to release once the entries are used.
 */
int col_read_properties(PyObject *m, entries_t *e, PyObject **hold) {
    e->len = 0;
    PyObject *props = slot(m, S_PROPS);
    if (props == NULL) {
        return FALLBACK;
    }
    if (props != Py_None) {
        return PyDict_CheckExact(props) ? parse_dict(e, props) : FALLBACK;
    }
    PyObject *raw = slot(m, S_PROPS_RAW);
    const char *text;
    Py_ssize_t n;
    if (raw == NULL) {
        return FALLBACK;
    }
    if (raw == Py_None) {
        return 0;
    }
    if (PyBytes_CheckExact(raw)) {
        text = PyBytes_AS_STRING(raw);
        n = PyBytes_GET_SIZE(raw);
        if (!valid_utf8((const unsigned char *)text, n)) {
            *hold = PyUnicode_DecodeUTF8(text, n, "replace");
            if (*hold == NULL) {
                return -1;
            }
            int rc = col_utf8_of(*hold, &text, &n);
            if (rc != 0) {
                return rc;
            }
        }
    } else {
        int rc = col_utf8_of(raw, &text, &n);
        if (rc != 0) {
            return rc;
        }
    }
    if (parse_text(e, text, n) < 0) {
        return -1;
    }
    /* A repeated key: the Python builder's per-row path decides which one shows. */
    for (Py_ssize_t i = 1; i < e->len; i++) {
        for (Py_ssize_t j = 0; j < i; j++) {
            if (e->items[i].key_len == e->items[j].key_len &&
                e->items[i].key[0] == e->items[j].key[0] && memcmp(e->items[i].key, e->items[j].key, (size_t)e->items[i].key_len) == 0) {
                return FALLBACK;
            }
        }
    }
    return 0;
}

/* Adds a name to the table, or gives an existing one a role or hides it. */
int col_add_name(PyObject *s, int role, int hidden) {
    const char *p;
    Py_ssize_t n;
    int rc = col_utf8_of(s, &p, &n);
    if (rc != 0) {
        if (rc == FALLBACK) {
            PyErr_SetString(PyExc_TypeError, "property names must be str");
        }
        return -1;
    }
    if (n == 0 || n > MAX_NAME_LEN) {
        PyErr_SetString(PyExc_ValueError, "property names must be 1 to 63 bytes");
        return -1;
    }
    name_t *name = (name_t *)name_of(p, n);
    if (name == NULL) {
        if (col_n_names == MAX_NAMES) {
            PyErr_SetString(PyExc_ValueError, "too many property names");
            return -1;
        }
        name = &col_names[col_n_names++];
        memcpy(name->text, p, (size_t)n);
        name->len = n;
        name->role = ROLE_NONE;
        name->hidden = 0;
        col_name_lengths |= UINT64_C(1) << n;
    }
    if (role != ROLE_NONE) {
        name->role = role;
    }
    name->hidden |= hidden;
    return 0;
}
