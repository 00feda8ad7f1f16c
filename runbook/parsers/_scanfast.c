/* The two passes of runbook/parsers/scan.py that touch every byte of a gigabyte log, in C.
 *
 * Why by hand: Python counts a block's newlines with bytes.count (0.4 s/GiB, holding the
 * interpreter's lock) and tallies a corrected-AER storm with re.finditer (0.7-1.0 s/GiB: the
 * regular-expression engine walks byte by byte to its literal prefix, and each of a storm's
 * hundreds of thousands of matches costs a match object and a dictionary update in Python). No library counts one
 * key per match of a pattern without handing every match back to Python; Hyperscan's callbacks
 * are Python calls too. Both passes here run without the interpreter's lock, so the
 * read-ahead thread's Python work goes on beside them.
 *
 * newlines(buffer, lo, hi) -> int
 *     The number of b"\n" in buffer[lo:hi] (bytes.count's answer).
 *
 * tally(buffer, lo, hi, steps) -> dict[bytes, list[int]]
 *     Every match of a "literal sequence" in buffer[lo:hi], left to right, not overlapping, as
 *     re.finditer finds them: `steps` is a tuple of tuples of bytes; a match is one
 *     alternative of each step in turn (tried in order, backtracking as re does), then one or
 *     more bytes that are not ASCII whitespace (the key: the pattern's (\S+), greedy). The
 *     first step has exactly one, non-empty, literal (where a match can begin). The answer:
 *     key -> [count, offset of the first match, offset of the last match], keys in the order
 *     first seen. scan.Literals builds the regular expression of the same steps; the unit
 *     tests hold the two to the same answers on generated input.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

/* bytes that \s matches in a bytes pattern (Python's re: ASCII isspace) */
static inline int is_space(unsigned char c) {
    return c == ' ' || (c >= '\t' && c <= '\r');
}

static Py_ssize_t count_newlines(const unsigned char *p, Py_ssize_t n) {
    Py_ssize_t count = 0;
    Py_ssize_t i = 0;
    /* eight bytes at a time: a byte of x ^ 0x0a.. is zero exactly where a newline is; the
     * expression added to `lanes` holds 1 in that byte and 0 in the others (no carries
     * between bytes); the bytes of `lanes` add up at most 255 words before they are summed */
    const uint64_t lows = 0x7f7f7f7f7f7f7f7fULL, nl = 0x0a0a0a0a0a0a0a0aULL;
    while (i + 8 <= n) {
        uint64_t lanes = 0;
        for (int w = 0; w < 255 && i + 8 <= n; w++, i += 8) {
            uint64_t x;
            memcpy(&x, p + i, 8);
            x ^= nl;
            lanes += (~(((x & lows) + lows) | x | lows)) >> 7;
        }
        lanes = (lanes & 0x00ff00ff00ff00ffULL) + ((lanes >> 8) & 0x00ff00ff00ff00ffULL);
        count += (Py_ssize_t)((lanes * 0x0001000100010001ULL) >> 48);
    }
    for (; i < n; i++)
        count += p[i] == '\n';
    return count;
}

typedef struct {
    const unsigned char **lits; /* the alternatives, in order */
    Py_ssize_t *lens;
    Py_ssize_t n;
} Step;

/* memcmp(a, b, n) == 0 for the few bytes of a literal (a call to memcmp costs more) */
static inline int same(const unsigned char *a, const unsigned char *b, Py_ssize_t n) {
    for (Py_ssize_t i = 0; i < n; i++)
        if (a[i] != b[i])
            return 0;
    return 1;
}

/* where the key begins when steps[k:] match at p (before end), else NULL */
static const unsigned char *match_steps(const Step *steps, Py_ssize_t nsteps, Py_ssize_t k,
                                        const unsigned char *p, const unsigned char *end) {
    if (k == nsteps)
        return (p < end && !is_space(*p)) ? p : NULL;
    for (Py_ssize_t a = 0; a < steps[k].n; a++) {
        Py_ssize_t len = steps[k].lens[a];
        if (len > end - p || !same(p, steps[k].lits[a], len))
            continue;
        const unsigned char *key = match_steps(steps, nsteps, k + 1, p + len, end);
        if (key != NULL)
            return key;
    }
    return NULL;
}

typedef struct {
    const unsigned char *key;
    Py_ssize_t len, count, first, last;
} Entry;

typedef struct {
    Entry *entries; /* in the order first seen */
    Py_ssize_t used, cap;
    Py_ssize_t *slots; /* open addressing: index + 1 into entries, 0 empty */
    Py_ssize_t nslots; /* a power of two */
} Table;

static uint64_t hash_bytes(const unsigned char *p, Py_ssize_t n) {
    uint64_t h = 1469598103934665603ULL; /* FNV-1a */
    for (Py_ssize_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 1099511628211ULL;
    return h;
}

static int table_grow(Table *t) {
    Py_ssize_t nslots = t->nslots ? t->nslots * 2 : 64;
    Py_ssize_t *slots = calloc((size_t)nslots, sizeof *slots);
    if (slots == NULL)
        return -1;
    for (Py_ssize_t i = 0; i < t->used; i++) {
        uint64_t h = hash_bytes(t->entries[i].key, t->entries[i].len);
        Py_ssize_t s = (Py_ssize_t)(h & (uint64_t)(nslots - 1));
        while (slots[s])
            s = (s + 1) & (nslots - 1);
        slots[s] = i + 1;
    }
    free(t->slots);
    t->slots = slots;
    t->nslots = nslots;
    return 0;
}

/* count a match of `key` at `at`; -1 when out of memory */
static int table_add(Table *t, const unsigned char *key, Py_ssize_t len, Py_ssize_t at) {
    if ((t->used + 1) * 2 > t->nslots && table_grow(t) < 0)
        return -1;
    uint64_t h = hash_bytes(key, len);
    Py_ssize_t s = (Py_ssize_t)(h & (uint64_t)(t->nslots - 1));
    while (t->slots[s]) {
        Entry *e = &t->entries[t->slots[s] - 1];
        if (e->len == len && memcmp(e->key, key, (size_t)len) == 0) {
            e->count++;
            e->last = at;
            return 0;
        }
        s = (s + 1) & (t->nslots - 1);
    }
    if (t->used == t->cap) {
        Py_ssize_t cap = t->cap ? t->cap * 2 : 32;
        Entry *entries = realloc(t->entries, (size_t)cap * sizeof *entries);
        if (entries == NULL)
            return -1;
        t->entries = entries;
        t->cap = cap;
    }
    t->entries[t->used] = (Entry){key, len, 1, at, at};
    t->slots[s] = ++t->used;
    return 0;
}

/* the range [lo, hi) of a buffer of `size` bytes, clamped as a slice is */
static int clamp(Py_ssize_t size, Py_ssize_t *lo, Py_ssize_t *hi) {
    if (*lo < 0 || *hi < 0) {
        PyErr_SetString(PyExc_ValueError, "negative offset");
        return -1;
    }
    if (*hi > size)
        *hi = size;
    if (*lo > *hi)
        *lo = *hi;
    return 0;
}

static PyObject *newlines(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi, count;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nn:newlines", &view, &lo, &hi))
        return NULL;
    if (clamp(view.len, &lo, &hi) < 0) {
        PyBuffer_Release(&view);
        return NULL;
    }
    Py_BEGIN_ALLOW_THREADS
    count = count_newlines((const unsigned char *)view.buf + lo, hi - lo);
    Py_END_ALLOW_THREADS
    PyBuffer_Release(&view);
    return PyLong_FromSsize_t(count);
}

static void free_steps(Step *steps, Py_ssize_t n) {
    for (Py_ssize_t k = 0; k < n; k++) {
        free(steps[k].lits);
        free(steps[k].lens);
    }
    free(steps);
}

/* the steps of a tuple of tuples of bytes (borrowing their buffers: the tuple is kept alive by
 * the caller's argument); NULL with an exception set when malformed */
static Step *read_steps(PyObject *spec, Py_ssize_t *nsteps) {
    if (!PyTuple_Check(spec) || PyTuple_GET_SIZE(spec) == 0) {
        PyErr_SetString(PyExc_TypeError, "steps: a non-empty tuple of tuples of bytes");
        return NULL;
    }
    Py_ssize_t n = PyTuple_GET_SIZE(spec);
    Step *steps = calloc((size_t)n, sizeof *steps);
    if (steps == NULL) {
        PyErr_NoMemory();
        return NULL;
    }
    for (Py_ssize_t k = 0; k < n; k++) {
        PyObject *alts = PyTuple_GET_ITEM(spec, k);
        if (!PyTuple_Check(alts) || PyTuple_GET_SIZE(alts) == 0) {
            PyErr_SetString(PyExc_TypeError, "steps: each step a non-empty tuple of bytes");
            goto fail;
        }
        Py_ssize_t m = PyTuple_GET_SIZE(alts);
        steps[k].n = m;
        steps[k].lits = calloc((size_t)m, sizeof *steps[k].lits);
        steps[k].lens = calloc((size_t)m, sizeof *steps[k].lens);
        if (steps[k].lits == NULL || steps[k].lens == NULL) {
            PyErr_NoMemory();
            goto fail;
        }
        for (Py_ssize_t a = 0; a < m; a++) {
            PyObject *lit = PyTuple_GET_ITEM(alts, a);
            if (!PyBytes_Check(lit)) {
                PyErr_SetString(PyExc_TypeError, "steps: each alternative bytes");
                goto fail;
            }
            steps[k].lits[a] = (const unsigned char *)PyBytes_AS_STRING(lit);
            steps[k].lens[a] = PyBytes_GET_SIZE(lit);
        }
    }
    if (steps[0].n != 1 || steps[0].lens[0] == 0) {
        PyErr_SetString(PyExc_ValueError, "steps: the first step is one non-empty literal");
        goto fail;
    }
    *nsteps = n;
    return steps;
fail:
    free_steps(steps, n);
    return NULL;
}

static PyObject *tally(PyObject *self, PyObject *args) {
    Py_buffer view;
    Py_ssize_t lo, hi, nsteps = 0;
    PyObject *spec, *result = NULL;
    Table table = {0};
    int failed = 0;
    (void)self;
    if (!PyArg_ParseTuple(args, "y*nnO:tally", &view, &lo, &hi, &spec))
        return NULL;
    Step *steps = read_steps(spec, &nsteps);
    if (steps == NULL || clamp(view.len, &lo, &hi) < 0)
        goto done;
    Py_BEGIN_ALLOW_THREADS
    const unsigned char *base = view.buf, *end = base + hi, *p = base + lo;
    const unsigned char *anchor = steps[0].lits[0];
    Py_ssize_t anchor_len = steps[0].lens[0];
    while (p < end) {
        /* the anchor's first byte by memchr, then the rest (glibc's memmem prepares its
         * search on every call: slower here, where a storm holds a match every few lines) */
        const unsigned char *hit = memchr(p, anchor[0], (size_t)(end - p));
        if (hit == NULL || anchor_len > end - hit)
            break;
        if (!same(hit + 1, anchor + 1, anchor_len - 1)) {
            p = hit + 1;
            continue;
        }
        const unsigned char *key = match_steps(steps, nsteps, 1, hit + anchor_len, end);
        if (key == NULL) {
            p = hit + 1;
            continue;
        }
        const unsigned char *stop = key;
        while (stop < end && !is_space(*stop))
            stop++;
        if (table_add(&table, key, stop - key, hit - base) < 0) {
            failed = 1;
            break;
        }
        p = stop;
    }
    Py_END_ALLOW_THREADS
    if (failed) {
        PyErr_NoMemory();
        goto done;
    }
    result = PyDict_New();
    for (Py_ssize_t i = 0; result != NULL && i < table.used; i++) {
        Entry *e = &table.entries[i];
        PyObject *key = PyBytes_FromStringAndSize((const char *)e->key, e->len);
        PyObject *value = Py_BuildValue("[nnn]", e->count, e->first, e->last);
        if (key == NULL || value == NULL || PyDict_SetItem(result, key, value) < 0)
            Py_CLEAR(result);
        Py_XDECREF(key);
        Py_XDECREF(value);
    }
done:
    if (steps != NULL)
        free_steps(steps, nsteps);
    free(table.entries);
    free(table.slots);
    PyBuffer_Release(&view);
    return result;
}

static PyMethodDef methods[] = {
    {"newlines", newlines, METH_VARARGS, "newlines(buffer, lo, hi): b'\\n' in buffer[lo:hi]."},
    {"tally", tally, METH_VARARGS,
     "tally(buffer, lo, hi, steps): key -> [count, first, last] of a literal sequence's "
     "matches."},
    {NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {
    PyModuleDef_HEAD_INIT, "runbook.parsers._scanfast",
    "Newline counting and the storm tally of runbook.parsers.scan, in C.", -1, methods,
    NULL, NULL, NULL, NULL,
};

PyMODINIT_FUNC PyInit__scanfast(void) { return PyModule_Create(&module); }
