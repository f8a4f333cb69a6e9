/*
 * The offsets of MessageExt's slots, for the compiled extensions that read or
 * write them directly (wire/_speedups.c, plugins/spark/_columns.c).
 *
 * Python hands over the member descriptors once (configure); only an object slot
 * (T_OBJECT_EX) that the given type itself defines is accepted, because a slot of
 * another type or a subclass would sit at an offset MessageExt does not have.
 */
#ifndef RMQK_SLOT_OFFSETS_H
#define RMQK_SLOT_OFFSETS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

/*
 * Checks descriptors[0..n) and stores their offsets in offsets[0..n); the caller
 * has checked that the tuple holds n items. -1 with TypeError set at the first
 * descriptor refused (the offsets before it are already stored).
 */
static inline int rmqk_slot_offsets(PyTypeObject *type, PyObject *descriptors,
                                    Py_ssize_t *offsets, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++) {
        PyObject *d = PyTuple_GET_ITEM(descriptors, i);
        if (!PyObject_TypeCheck(d, &PyMemberDescr_Type)) {
            PyErr_SetString(PyExc_TypeError, "not a slot (member descriptor)");
            return -1;
        }
        PyMemberDef *m = ((PyMemberDescrObject *)d)->d_member;
        if (m->type != T_OBJECT_EX || ((PyDescrObject *)d)->d_type != type) {
            PyErr_SetString(PyExc_TypeError, "not an object slot of the given type");
            return -1;
        }
        offsets[i] = m->offset;
    }
    return 0;
}

#endif
