/*
 * Optional compiled helpers for ProcessQueue (rmqk.engine.process_queue): the put of
 * a pulled batch and the removal of an acknowledged one, the two per-message loops
 * of the concurrent push consumer. Each does exactly what the pure-Python code
 * beside it does; process_queue falls back to that code without this module.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyObject *str_queue_offset = NULL;
static PyObject *str_body = NULL;
static PyObject *str_extend = NULL;
static PyObject *str_popleft = NULL;

/*
 * put_ascending(msgs: dict, order: deque, batch: list, held: int) -> (last, size) | None
 *
 * When every offset of ``batch`` is above ``held`` and above the one before it,
 * adds each message to ``msgs`` under its offset, appends the offsets to
 * ``order`` and returns the last offset and the sum of the body lengths.
 * Otherwise changes nothing and returns None (the caller's general path).
 */
static PyObject *put_ascending(PyObject *self, PyObject *args) {
    PyObject *msgs, *order, *batch, *held;
    if (!PyArg_ParseTuple(args, "O!OO!O!", &PyDict_Type, &msgs, &order, &PyList_Type, &batch,
                          &PyLong_Type, &held)) {
        return NULL;
    }
    Py_ssize_t n = PyList_GET_SIZE(batch);
    PyObject *offsets = PyList_New(n);
    if (offsets == NULL) {
        return NULL;
    }
    PyObject *result = NULL;
    Py_ssize_t size = 0;
    PyObject *previous = held;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *off = PyObject_GetAttr(PyList_GET_ITEM(batch, i), str_queue_offset);
        if (off == NULL) {
            goto done;
        }
        PyList_SET_ITEM(offsets, i, off);
        int above = PyObject_RichCompareBool(off, previous, Py_GT);
        if (above < 0) {
            goto done;
        }
        if (!above) {
            result = Py_NewRef(Py_None);
            goto done;
        }
        previous = off;
        PyObject *body = PyObject_GetAttr(PyList_GET_ITEM(batch, i), str_body);
        if (body == NULL) {
            goto done;
        }
        Py_ssize_t len = PyObject_Size(body);
        Py_DECREF(body);
        if (len < 0) {
            goto done;
        }
        size += len;
    }
    for (Py_ssize_t i = 0; i < n; i++) {
        if (PyDict_SetItem(msgs, PyList_GET_ITEM(offsets, i), PyList_GET_ITEM(batch, i)) < 0) {
            goto done;
        }
    }
    PyObject *extended = PyObject_CallMethodOneArg(order, str_extend, offsets);
    if (extended == NULL) {
        goto done;
    }
    Py_DECREF(extended);
    result = Py_BuildValue("On", n ? PyList_GET_ITEM(offsets, n - 1) : held, size);
done:
    Py_DECREF(offsets);
    return result;
}

/*
 * remove_acked(msgs: dict, started: dict, batch: iterable) -> (removed, size)
 *
 * Pops each message's offset from ``started`` and from ``msgs``; counts the
 * messages ``msgs`` still held and the sum of their body lengths.
 */
static PyObject *remove_acked(PyObject *self, PyObject *args) {
    PyObject *msgs, *started, *batch;
    if (!PyArg_ParseTuple(args, "O!O!O", &PyDict_Type, &msgs, &PyDict_Type, &started, &batch)) {
        return NULL;
    }
    PyObject *seq = PySequence_Fast(batch, "messages must be iterable");
    if (seq == NULL) {
        return NULL;
    }
    Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
    Py_ssize_t removed = 0, size = 0;
    PyObject *result = NULL;
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *off = PyObject_GetAttr(PySequence_Fast_GET_ITEM(seq, i), str_queue_offset);
        if (off == NULL) {
            goto done;
        }
        if (PyDict_Contains(started, off) == 1 && PyDict_DelItem(started, off) < 0) {
            Py_DECREF(off);
            goto done;
        }
        PyObject *held = PyDict_GetItemWithError(msgs, off);
        if (held == NULL) {
            Py_DECREF(off);
            if (PyErr_Occurred()) {
                goto done;
            }
            continue;
        }
        Py_INCREF(held);
        int deleted = PyDict_DelItem(msgs, off);
        Py_DECREF(off);
        if (deleted < 0) {
            Py_DECREF(held);
            goto done;
        }
        PyObject *body = PyObject_GetAttr(held, str_body);
        Py_DECREF(held);
        if (body == NULL) {
            goto done;
        }
        Py_ssize_t len = PyObject_Size(body);
        Py_DECREF(body);
        if (len < 0) {
            goto done;
        }
        removed++;
        size += len;
    }
    result = Py_BuildValue("nn", removed, size);
done:
    Py_DECREF(seq);
    return result;
}

/*
 * first_key(order: deque, msgs: dict) -> int | None
 *
 * Pops the offsets ``msgs`` no longer holds from the left of ``order`` and
 * returns the first one it holds, or None when ``order`` runs empty: an
 * acknowledged pull leaves its offsets there, one Python loop turn each.
 */
static PyObject *first_key(PyObject *self, PyObject *args) {
    PyObject *order, *msgs;
    if (!PyArg_ParseTuple(args, "OO!", &order, &PyDict_Type, &msgs)) {
        return NULL;
    }
    for (;;) {
        int nonempty = PyObject_IsTrue(order);
        if (nonempty <= 0) {
            if (nonempty < 0) {
                return NULL;
            }
            Py_RETURN_NONE;
        }
        PyObject *head = PySequence_GetItem(order, 0);
        if (head == NULL) {
            return NULL;
        }
        int held = PyDict_Contains(msgs, head);
        if (held != 0) {
            if (held < 0) {
                Py_DECREF(head);
                return NULL;
            }
            return head;
        }
        Py_DECREF(head);
        PyObject *popped = PyObject_CallMethodNoArgs(order, str_popleft);
        if (popped == NULL) {
            return NULL;
        }
        Py_DECREF(popped);
    }
}

static PyMethodDef methods[] = {
    {"put_ascending", put_ascending, METH_VARARGS,
     "put_ascending(msgs, order, batch, held) -> (last_offset, size) or None"},
    {"remove_acked", remove_acked, METH_VARARGS,
     "remove_acked(msgs, started, batch) -> (removed, size)"},
    {"first_key", first_key, METH_VARARGS, "first_key(order, msgs) -> first held offset or None"},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "_pq_speedups",
    "Optional compiled ProcessQueue loops; process_queue falls back to Python without it.", -1,
    methods,
};

PyMODINIT_FUNC PyInit__pq_speedups(void) {
    str_queue_offset = PyUnicode_InternFromString("queue_offset");
    str_body = PyUnicode_InternFromString("body");
    str_extend = PyUnicode_InternFromString("extend");
    str_popleft = PyUnicode_InternFromString("popleft");
    if (str_queue_offset == NULL || str_body == NULL || str_extend == NULL ||
        str_popleft == NULL) {
        return NULL;
    }
    return PyModule_Create(&module);
}
