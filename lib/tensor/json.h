/* json: the one JSON reader of the library, strict (RFC 8259: no trailing
 * commas, leading zeros, bare words or control characters in strings),
 * pulled value by value by its caller, which knows the layout it expects:
 * the safetensors header, collx-plot's traces. A failure is one line
 * saying where: "PATH:LINE: reason" in a JSON file of its own, "bad JSON
 * at byte N: reason" in JSON inside another format. */
#ifndef COLLX_TENSOR_JSON_H
#define COLLX_TENSOR_JSON_H

#include <stddef.h>
#include <stdint.h>

/* Nesting deeper than this is refused (tensor_json_skip recurses). */
#define TENSOR_JSON_MAX_DEPTH 64

struct tensor_json {
	const unsigned char *s;
	size_t n, i;		/* the text, its length, the next byte */
	int depth;
	const char *path;	/* NULL: the text is part of another format */
	char *err;
	size_t errlen;
};

/* The text need not end in NUL. */
void tensor_json_init(struct tensor_json *j, const void *text, size_t len,
    const char *path, char *err, size_t errlen);
/* -1, with the reason at the current position in err. */
int tensor_json_fail(struct tensor_json *j, const char *fmt, ...)
    __attribute__((format(printf, 2, 3)));

/* The next byte after blanks, or -1 at the end of the text. */
int tensor_json_peek(struct tensor_json *j);
/* 1, past it, when the next byte after blanks is c; else 0. */
int tensor_json_eat(struct tensor_json *j, int c);
/* 0 past c, else -1 "expected 'c'". */
int tensor_json_expect(struct tensor_json *j, int c);
/* 1 past a literal null, 0 when the next value is not null. */
int tensor_json_null(struct tensor_json *j);

/* A string with its escapes decoded to UTF-8 (\u0000 refused), malloc'd
 * into *out. */
int tensor_json_string(struct tensor_json *j, char **out);
/* A number that must be a non-negative integer below 2^64. */
int tensor_json_uint(struct tensor_json *j, uint64_t *v);
/* Any number, the nearest double; one out of a double's range is refused. */
int tensor_json_number(struct tensor_json *j, double *v);
/* Any well-formed value, passed over (members a reader does not use). */
int tensor_json_skip(struct tensor_json *j);
/* An object, each member's value handed to fn with its key (fn reads
 * the value, or passes it over with tensor_json_skip); 0 or -1. */
typedef int tensor_json_member_fn(struct tensor_json *j, const char *key,
    void *arg);
int tensor_json_object(struct tensor_json *j, tensor_json_member_fn *fn,
    void *arg);
/* An array, each item read by fn; 0 or -1. */
typedef int tensor_json_item_fn(struct tensor_json *j, void *arg);
int tensor_json_array(struct tensor_json *j, tensor_json_item_fn *fn,
    void *arg);
/* A string cut to len bytes into buf, or null as ""; 0 or -1. */
int tensor_json_strbuf(struct tensor_json *j, char *buf, size_t len);
/* 0 when only blanks are left, else -1 "text after the JSON value". */
int tensor_json_end(struct tensor_json *j);

#endif
