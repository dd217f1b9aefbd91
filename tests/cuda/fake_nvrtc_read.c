/*
 * fake_nvrtc_read.c -- the CPU stand-in for NVRTC's reading of a program
 * (fake_libnvrtc.c has the entry points and writes the images): as far as
 * its kernels' declarations, no further.
 *
 * What it reads: comments and line continuations (line numbers kept for
 * messages); #define, function-like macros expanded wherever they are
 * invoked (arguments substituted, ## pasted, # stringized, the expansion
 * rescanned, a macro never inside its own expansion), object-like ones
 * kept only for #ifdef; #ifdef, #ifndef, #if 0, #if 1, #else, #endif;
 * typedefs of scalar types; and every `extern "C" __global__ void
 * NAME(PARAMETERS)`, each parameter's PTX type from its C type (pointers
 * .u64; C scalar types and typedefs of them; LP64).  What it refuses,
 * with a message in NVRTC's format ("FILE(LINE): error: ..."): #error,
 * #include (it has no headers), other #if expressions, unknown
 * directives, a macro given the wrong number of arguments, a kernel
 * declared twice, a parameter type it does not know.  It reads nothing
 * inside a kernel's body, and no C++ beyond the declarations.
 */
#include "fake_nvrtc_read.h"

#include <ctype.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define MAX_KERNELS 256
#define MAX_MACROS 256
#define MAX_TYPEDEFS 64
#define MAX_DEPTH 16

/* ------------------------------------------------------------------------
 * Reading the program: tokens
 * ---------------------------------------------------------------------- */

typedef struct tok {
    char *s; /* the token's text, owned */
    int line;
} tok;

typedef struct toks {
    tok *v;
    int n, cap;
} toks;

typedef struct macro {
    char name[64];
    int fn;               /* function-like */
    int nparams;
    char params[16][32];
    toks body;
    int active;           /* being expanded: not again, as in C */
} macro;

/* One compile's state. */
typedef struct unit {
    const char *file;
    char *log;
    int failed;
    macro *macros;
    int nmacros;
    char tdname[MAX_TYPEDEFS][48], tdtype[MAX_TYPEDEFS][64];
    int ntypedefs;
    fake_kernel *kernels;
    int nkernels;
} unit;

static void error_at(unit *u, int line, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void error_at(unit *u, int line, const char *fmt, ...)
{
    if (u->failed)
        return; /* the first error is the one reported */
    u->failed = 1;
    char msg[600];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof msg, fmt, ap);
    va_end(ap);
    snprintf(u->log, FAKE_NVRTC_LOG_MAX, "%s(%d): error: %s\n\n1 error detected in the "
             "compilation of \"%s\".\n", u->file, line, msg, u->file);
}

static int push(toks *t, const char *s, size_t len, int line)
{
    if (t->n == t->cap) {
        int cap = t->cap ? t->cap * 2 : 64;
        tok *v = realloc(t->v, (size_t)cap * sizeof *v);
        if (v == NULL)
            return -1;
        t->v = v;
        t->cap = cap;
    }
    char *c = malloc(len + 1);
    if (c == NULL)
        return -1;
    memcpy(c, s, len);
    c[len] = '\0';
    t->v[t->n].s = c;
    t->v[t->n].line = line;
    t->n++;
    return 0;
}

static void toks_free(toks *t)
{
    for (int i = 0; i < t->n; i++)
        free(t->v[i].s);
    free(t->v);
    memset(t, 0, sizeof *t);
}

static int is_ident_start(int c) { return isalpha(c) || c == '_'; }
static int is_ident(int c) { return isalnum(c) || c == '_'; }

/* Split s[0..len) into tokens: identifiers, numbers, string and character
 * literals, "##", and single punctuators (enough to find declarations). */
static int tokenize(const char *s, size_t len, int line, toks *out)
{
    size_t i = 0;
    while (i < len) {
        char c = s[i];
        if (c == '\n') {
            line++;
            i++;
        } else if (isspace((unsigned char)c)) {
            i++;
        } else if (is_ident_start((unsigned char)c) ||
                   isdigit((unsigned char)c)) {
            size_t j = i;
            while (j < len && (is_ident((unsigned char)s[j]) ||
                               (isdigit((unsigned char)s[i]) && s[j] == '.')))
                j++;
            if (push(out, s + i, j - i, line))
                return -1;
            i = j;
        } else if (c == '"' || c == '\'') {
            size_t j = i + 1;
            while (j < len && s[j] != c && s[j] != '\n')
                j += s[j] == '\\' ? 2 : 1;
            if (j < len && s[j] == c)
                j++;
            if (push(out, s + i, j - i, line))
                return -1;
            i = j;
        } else if (c == '#' && i + 1 < len && s[i + 1] == '#') {
            if (push(out, "##", 2, line))
                return -1;
            i += 2;
        } else {
            if (push(out, s + i, 1, line))
                return -1;
            i++;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------------
 * Reading the program: lines and directives
 * ---------------------------------------------------------------------- */

/* The source with comments blanked (newlines kept, so line numbers
 * hold) and "\\\n" continuations joined (the newline moved after the
 * joined line, for the same reason). */
static char *strip(const char *src)
{
    size_t n = strlen(src);
    char *out = malloc(n + 1);
    if (out == NULL)
        return NULL;
    size_t o = 0, held = 0; /* newlines owed by joined lines */
    for (size_t i = 0; i < n;) {
        if (src[i] == '/' && src[i + 1] == '*') {
            i += 2;
            out[o++] = ' ';
            while (i < n && !(src[i] == '*' && src[i + 1] == '/')) {
                if (src[i] == '\n')
                    out[o++] = '\n';
                i++;
            }
            i = i < n ? i + 2 : n;
        } else if (src[i] == '/' && src[i + 1] == '/') {
            while (i < n && src[i] != '\n')
                i++;
        } else if (src[i] == '"' || src[i] == '\'') {
            char q = src[i];
            out[o++] = src[i++];
            while (i < n && src[i] != q && src[i] != '\n') {
                if (src[i] == '\\' && i + 1 < n)
                    out[o++] = src[i++];
                out[o++] = src[i++];
            }
            if (i < n && src[i] == q)
                out[o++] = src[i++];
        } else if (src[i] == '\\' && src[i + 1] == '\n') {
            held++;
            i += 2;
        } else if (src[i] == '\n') {
            out[o++] = src[i++];
            for (; held > 0; held--)
                out[o++] = '\n';
        } else {
            out[o++] = src[i++];
        }
    }
    out[o] = '\0';
    return out;
}

static macro *find_macro(unit *u, const char *name)
{
    for (int i = 0; i < u->nmacros; i++)
        if (strcmp(u->macros[i].name, name) == 0)
            return &u->macros[i];
    return NULL;
}

/* "#define NAME(a, b) body" or "#define NAME body". */
static void define(unit *u, const char *p, int line)
{
    while (*p == ' ' || *p == '\t')
        p++;
    size_t k = 0;
    while (is_ident((unsigned char)p[k]))
        k++;
    if (k == 0 || k >= sizeof u->macros[0].name) {
        error_at(u, line, "expected a macro name");
        return;
    }
    char name[64];
    memcpy(name, p, k);
    name[k] = '\0';
    macro *m = find_macro(u, name);
    if (m == NULL) {
        if (u->nmacros == MAX_MACROS) {
            error_at(u, line, "more macros than the stand-in keeps");
            return;
        }
        m = &u->macros[u->nmacros++];
    } else {
        toks_free(&m->body);
    }
    memset(m, 0, sizeof *m);
    memcpy(m->name, name, k + 1);
    p += k;
    if (*p == '(') {
        m->fn = 1;
        p++;
        for (;;) {
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == ')') {
                p++;
                break;
            }
            size_t j = 0;
            while (is_ident((unsigned char)p[j]))
                j++;
            if (j == 0 || j >= sizeof m->params[0] || m->nparams == 16) {
                error_at(u, line, "bad parameter list of macro %s", name);
                return;
            }
            memcpy(m->params[m->nparams], p, j);
            m->params[m->nparams++][j] = '\0';
            p += j;
            while (*p == ' ' || *p == '\t')
                p++;
            if (*p == ',')
                p++;
            else if (*p != ')') {
                error_at(u, line, "bad parameter list of macro %s", name);
                return;
            }
        }
    }
    if (tokenize(p, strlen(p), line, &m->body))
        error_at(u, line, "out of memory");
}

/* The directives, in order; every other line's text is appended to text
 * (lines a false conditional skips left blank).  Returns 0, or -1 with
 * the error in the log. */
static int preprocess(unit *u, char *s, toks *text)
{
    int line = 1;
    /* The conditional stack: whether each level is taken, and whether the
     * levels around it are. */
    int on[32], depth = 0, active = 1;
    for (char *p = s; *p != '\0' && !u->failed;) {
        char *nl = strchr(p, '\n');
        if (nl != NULL)
            *nl = '\0'; /* the line alone (the text is ours) */
        size_t len = strlen(p);
        char *q = p;
        while (q < p + len && (*q == ' ' || *q == '\t'))
            q++;
        if (q < p + len && *q == '#') {
            char *w = q + 1;
            while (*w == ' ' || *w == '\t')
                w++;
            size_t wl = 0;
            while (is_ident((unsigned char)w[wl]))
                wl++;
            char *arg = w + wl;
            while (*arg == ' ' || *arg == '\t')
                arg++;
            char argname[64] = "";
            sscanf(arg, "%63[A-Za-z0-9_]", argname);
#define IS(x) (wl == strlen(x) && strncmp(w, x, wl) == 0)
            if (IS("ifdef") || IS("ifndef") || IS("if")) {
                if (depth == 32) {
                    error_at(u, line, "conditionals nested too deep");
                    break;
                }
                int take;
                if (IS("if")) {
                    if (strcmp(argname, "0") != 0 &&
                        strcmp(argname, "1") != 0) {
                        if (active)
                            error_at(u, line, "the stand-in for NVRTC "
                                     "evaluates only #if 0 and #if 1, not "
                                     "#if %s", arg);
                        take = 0;
                    } else {
                        take = argname[0] == '1';
                    }
                } else {
                    take = (find_macro(u, argname) != NULL) == IS("ifdef");
                }
                on[depth++] = active;
                active = active && take;
            } else if (IS("else")) {
                if (depth == 0) {
                    error_at(u, line, "#else without #if");
                    break;
                }
                active = on[depth - 1] && !active;
            } else if (IS("endif")) {
                if (depth == 0) {
                    error_at(u, line, "#endif without #if");
                    break;
                }
                active = on[--depth];
            } else if (!active) {
                /* skipped */
            } else if (IS("define")) {
                define(u, arg, line);
            } else if (IS("undef")) {
                macro *m = find_macro(u, argname);
                if (m != NULL)
                    m->name[0] = '\0';
            } else if (IS("error")) {
                error_at(u, line, "#error directive: %s", arg);
            } else if (IS("include")) {
                error_at(u, line, "cannot open source file %s (the stand-in "
                         "for NVRTC has no headers)", arg);
            } else if (!IS("pragma") && wl > 0) {
                error_at(u, line, "unrecognized preprocessing directive "
                         "#%.*s", (int)wl, w);
            }
#undef IS
        } else if (active && len > 0) {
            if (tokenize(p, len, line, text))
                error_at(u, line, "out of memory");
        }
        if (nl == NULL)
            break;
        p = nl + 1;
        line++;
    }
    if (!u->failed && depth != 0)
        error_at(u, line, "expected an #endif");
    return u->failed ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * Reading the program: declarations
 * ---------------------------------------------------------------------- */

/* "typedef WORDS NAME ;" of a scalar type, at t[i]; returns the index
 * past it. */
static int read_typedef(unit *u, const toks *t, int i)
{
    int j = i + 1;
    char type[64] = "";
    while (j + 1 < t->n && strcmp(t->v[j + 1].s, ";") != 0) {
        if (!is_ident_start((unsigned char)t->v[j].s[0]))
            return j; /* a struct or a function type: not a scalar */
        size_t l = strlen(type);
        snprintf(type + l, sizeof type - l, "%s%s", l ? " " : "",
                 t->v[j].s);
        j++;
    }
    if (j + 1 < t->n && is_ident_start((unsigned char)t->v[j].s[0]) &&
        type[0] != '\0' && u->ntypedefs < MAX_TYPEDEFS) {
        snprintf(u->tdname[u->ntypedefs], sizeof u->tdname[0], "%s",
                 t->v[j].s);
        snprintf(u->tdtype[u->ntypedefs], sizeof u->tdtype[0], "%s", type);
        u->ntypedefs++;
    }
    return j;
}

/* The PTX parameter type of a C scalar type, through the typedefs; NULL
 * if unknown.  (LP64: long is 8 bytes.) */
static const char *ptx_type(const unit *u, const char *type, int depth)
{
    static const struct {
        const char *c, *ptx;
    } known[] = {
        {"char", "u8"},           {"signed char", "u8"},
        {"unsigned char", "u8"},  {"bool", "u8"},
        {"short", "u16"},         {"short int", "u16"},
        {"unsigned short", "u16"}, {"unsigned short int", "u16"},
        {"int", "u32"},           {"signed", "u32"},
        {"signed int", "u32"},    {"unsigned", "u32"},
        {"unsigned int", "u32"},  {"long", "u64"},
        {"long int", "u64"},      {"unsigned long", "u64"},
        {"long long", "u64"},     {"long long int", "u64"},
        {"unsigned long long", "u64"}, {"unsigned long long int", "u64"},
        {"float", "f32"},         {"double", "f64"},
    };
    for (size_t i = 0; i < sizeof known / sizeof known[0]; i++)
        if (strcmp(type, known[i].c) == 0)
            return known[i].ptx;
    for (int i = 0; i < u->ntypedefs && depth < 8; i++)
        if (strcmp(type, u->tdname[i]) == 0)
            return ptx_type(u, u->tdtype[i], depth + 1);
    return NULL;
}

/* A word that can end a parameter's type (so is not its name). */
static int is_type_word(const unit *u, const char *w)
{
    static const char *const words[] = {"char", "short", "int", "long",
                                        "signed", "unsigned", "float",
                                        "double", "bool", "void"};
    for (size_t i = 0; i < sizeof words / sizeof words[0]; i++)
        if (strcmp(w, words[i]) == 0)
            return 1;
    for (int i = 0; i < u->ntypedefs; i++)
        if (strcmp(w, u->tdname[i]) == 0)
            return 1;
    return 0;
}

/* `extern "C" __global__ void NAME(` at t[i]? */
static int is_kernel_head(const toks *t, int i)
{
    return i + 5 < t->n && strcmp(t->v[i].s, "extern") == 0 &&
           strcmp(t->v[i + 1].s, "\"C\"") == 0 &&
           strcmp(t->v[i + 2].s, "__global__") == 0 &&
           strcmp(t->v[i + 3].s, "void") == 0 &&
           is_ident_start((unsigned char)t->v[i + 4].s[0]) &&
           strcmp(t->v[i + 5].s, "(") == 0;
}

/* The kernel declared at t[i]; returns the index past its ')'. */
static int read_kernel(unit *u, const toks *t, int i)
{
    const char *name = t->v[i + 4].s;
    int line = t->v[i + 4].line;
    for (int k = 0; k < u->nkernels; k++)
        if (strcmp(u->kernels[k].name, name) == 0) {
            error_at(u, line, "function \"%s\" has already been defined",
                     name);
            return t->n;
        }
    if (u->nkernels == MAX_KERNELS ||
        strlen(name) >= sizeof u->kernels[0].name) {
        error_at(u, line, "more kernels than the stand-in keeps");
        return t->n;
    }
    fake_kernel *k = &u->kernels[u->nkernels++];
    memset(k, 0, sizeof *k);
    snprintf(k->name, sizeof k->name, "%s", name);
    int j = i + 6, start = j;
    for (int level = 0; j < t->n; j++) {
        const char *s = t->v[j].s;
        if (strcmp(s, "(") == 0) {
            level++;
            continue;
        }
        if (level > 0 && strcmp(s, ")") == 0) {
            level--;
            continue;
        }
        if (level > 0 || (strcmp(s, ",") != 0 && strcmp(s, ")") != 0))
            continue;
        /* A parameter is t[start..j): "(void)" is none; a last word that
         * is not a type word is the parameter's name. */
        int nt = j - start;
        if (nt == 0 && strcmp(s, ",") == 0) {
            error_at(u, t->v[j].line, "expected a parameter of %s", name);
            return t->n;
        }
        if (nt > 0 && !(nt == 1 && strcmp(t->v[start].s, "void") == 0 &&
                        k->nparams == 0 && strcmp(s, ")") == 0)) {
            int ptr = 0, end = j;
            for (int m = start; m < j; m++)
                ptr |= strcmp(t->v[m].s, "*") == 0;
            const char *lastw = t->v[j - 1].s;
            if (nt >= 2 && is_ident_start((unsigned char)lastw[0]) &&
                !is_type_word(u, lastw))
                end = j - 1;
            char type[64] = "";
            for (int m = start; m < end && !ptr; m++) {
                const char *w = t->v[m].s;
                if (strcmp(w, "const") == 0 || strcmp(w, "volatile") == 0 ||
                    strcmp(w, "__restrict__") == 0)
                    continue;
                size_t l = strlen(type);
                snprintf(type + l, sizeof type - l, "%s%s", l ? " " : "", w);
            }
            const char *pt = ptr ? "u64" : ptx_type(u, type, 0);
            if (pt == NULL) {
                error_at(u, t->v[start].line, "the stand-in for NVRTC does "
                         "not know the size of parameter type \"%s\" of %s "
                         "(tests/cuda/fake_libnvrtc.c knows C scalar types, "
                         "typedefs of them and pointers)", type, name);
                return t->n;
            }
            if (k->nparams == FAKE_NVRTC_MAX_PARAMS) {
                error_at(u, line, "%s: more parameters than the stand-in "
                         "keeps", name);
                return t->n;
            }
            snprintf(k->ptype[k->nparams++], sizeof k->ptype[0], "%s", pt);
        }
        start = j + 1;
        if (strcmp(s, ")") == 0)
            return j + 1;
    }
    error_at(u, line, "expected a \")\" after the parameters of %s", name);
    return t->n;
}

static int scan(unit *u, const toks *t, int depth);

/* The expansion of function-like macro m with args[0..nargs), each a range
 * of t, into out: parameters replaced, ## pasted, # stringized. */
static int expand(const macro *m, const toks *t, const int (*args)[2],
                  int line, toks *out)
{
    for (int b = 0; b < m->body.n; b++) {
        const char *s = m->body.v[b].s;
        int paste = out->n > 0 && b > 0 &&
                    strcmp(m->body.v[b - 1].s, "##") == 0;
        if (strcmp(s, "##") == 0)
            continue;
        int p = -1;
        for (int k = 0; k < m->nparams && p < 0; k++)
            if (strcmp(s, m->params[k]) == 0)
                p = k;
        if (strcmp(s, "#") == 0 && b + 1 < m->body.n) {
            /* #param: the argument's text as a string literal */
            for (int k = 0; k < m->nparams; k++)
                if (strcmp(m->body.v[b + 1].s, m->params[k]) == 0) {
                    char lit[256] = "\"";
                    for (int a = args[k][0]; a < args[k][1]; a++) {
                        size_t l = strlen(lit);
                        snprintf(lit + l, sizeof lit - l, "%s%s",
                                 a > args[k][0] ? " " : "", t->v[a].s);
                    }
                    strncat(lit, "\"", sizeof lit - strlen(lit) - 1);
                    if (push(out, lit, strlen(lit), line))
                        return -1;
                    b++;
                    p = -2;
                    break;
                }
            if (p == -2)
                continue;
        }
        int from = p >= 0 ? args[p][0] : 0, to = p >= 0 ? args[p][1] : 1;
        for (int a = from; a < to; a++) {
            const char *w = p >= 0 ? t->v[a].s : s;
            if (paste && a == from) {
                tok *prev = &out->v[out->n - 1];
                size_t l1 = strlen(prev->s), l2 = strlen(w);
                char *c = realloc(prev->s, l1 + l2 + 1);
                if (c == NULL)
                    return -1;
                memcpy(c + l1, w, l2 + 1);
                prev->s = c;
            } else if (push(out, w, strlen(w), line)) {
                return -1;
            }
        }
    }
    return 0;
}

/* Find the kernels in t, expanding function-like macros (their
 * expansions rescanned, a macro never inside its own expansion). */
static int scan(unit *u, const toks *t, int depth)
{
    if (depth > MAX_DEPTH) {
        error_at(u, t->n ? t->v[0].line : 0, "macros nested too deep");
        return -1;
    }
    for (int i = 0; i < t->n && !u->failed;) {
        const char *s = t->v[i].s;
        if (is_kernel_head(t, i)) {
            i = read_kernel(u, t, i);
            continue;
        }
        if (strcmp(s, "typedef") == 0 && depth == 0) {
            i = read_typedef(u, t, i);
            continue;
        }
        macro *m = is_ident_start((unsigned char)s[0]) ? find_macro(u, s)
                                                       : NULL;
        if (m == NULL || !m->fn || m->active || i + 1 >= t->n ||
            strcmp(t->v[i + 1].s, "(") != 0) {
            i++;
            continue;
        }
        /* The arguments: ranges of t split at top-level commas. */
        int args[16][2], nargs = 0, level = 0, j = i + 2, start = j;
        for (; j < t->n; j++) {
            const char *w = t->v[j].s;
            if (strcmp(w, "(") == 0) {
                level++;
            } else if (strcmp(w, ")") == 0 && level > 0) {
                level--;
            } else if (level == 0 &&
                       (strcmp(w, ",") == 0 || strcmp(w, ")") == 0)) {
                if (nargs == 16) {
                    error_at(u, t->v[i].line, "too many arguments to %s", s);
                    return -1;
                }
                if (!(strcmp(w, ")") == 0 && nargs == 0 && j == start &&
                      m->nparams == 0)) {
                    args[nargs][0] = start;
                    args[nargs][1] = j;
                    nargs++;
                }
                start = j + 1;
                if (strcmp(w, ")") == 0)
                    break;
            }
        }
        if (j == t->n) {
            error_at(u, t->v[i].line, "unterminated invocation of macro %s",
                     s);
            return -1;
        }
        if (nargs != m->nparams) {
            error_at(u, t->v[i].line, "macro \"%s\" takes %d argument%s, "
                     "given %d", s, m->nparams, m->nparams == 1 ? "" : "s",
                     nargs);
            return -1;
        }
        toks ex = {0};
        if (expand(m, t, (const int (*)[2])args, t->v[i].line, &ex)) {
            toks_free(&ex);
            error_at(u, t->v[i].line, "out of memory");
            return -1;
        }
        m->active = 1;
        scan(u, &ex, depth + 1);
        m->active = 0;
        toks_free(&ex);
        i = j + 1;
    }
    return u->failed ? -1 : 0;
}

/* ------------------------------------------------------------------------
 * The entry
 * ---------------------------------------------------------------------- */

int fake_nvrtc_read(const char *src, const char *file, fake_kernel **kernels,
                    int *count, char *log)
{
    *kernels = NULL;
    *count = 0;
    log[0] = '\0';
    unit u;
    memset(&u, 0, sizeof u);
    u.file = file;
    u.log = log;
    u.macros = calloc(MAX_MACROS, sizeof *u.macros);
    u.kernels = calloc(MAX_KERNELS, sizeof *u.kernels);
    char *text = strip(src);
    toks t = {0};
    int rc = 0;
    if (u.macros == NULL || u.kernels == NULL || text == NULL)
        rc = -2;
    else if (preprocess(&u, text, &t) != 0 || scan(&u, &t, 0) != 0)
        rc = -1; /* the log says why (out of memory included) */
    toks_free(&t);
    free(text);
    if (u.macros != NULL)
        for (int i = 0; i < u.nmacros; i++)
            toks_free(&u.macros[i].body);
    free(u.macros);
    if (rc != 0) {
        free(u.kernels);
        return rc;
    }
    *kernels = u.kernels;
    *count = u.nkernels;
    return 0;
}
