/* test_json: the strict JSON reader: values, what RFC 8259 refuses, where
 * failures are reported, text without a final NUL, and a document pulled
 * member by member as its readers do (a Chrome trace). */
#include <math.h>
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/json.h"
#include "unit.h"

static char err[COLLX_ERRLEN];

static void
open_text(struct tensor_json *j, const char *text, const char *path)
{
	tensor_json_init(j, text, strlen(text), path, err, sizeof err);
}

/* The whole text is one string, decoded to want. */
static int
string_is(const char *text, const char *want)
{
	struct tensor_json j;
	char *s;
	int ok;

	open_text(&j, text, NULL);
	if (tensor_json_string(&j, &s) < 0) {
		printf("# %s: %s\n", text, err);
		return 0;
	}
	ok = strcmp(s, want) == 0 && tensor_json_end(&j) == 0;
	free(s);
	return ok;
}

static int
number_is(const char *text, double want)
{
	struct tensor_json j;
	double v;

	open_text(&j, text, NULL);
	if (tensor_json_number(&j, &v) < 0) {
		printf("# %s: %s\n", text, err);
		return 0;
	}
	return v == want && tensor_json_end(&j) == 0;
}

/* The whole text, as one value skipped, is refused with needle in err. */
static int
refused(const char *text, const char *needle)
{
	struct tensor_json j;

	open_text(&j, text, NULL);
	if (tensor_json_skip(&j) == 0 && tensor_json_end(&j) == 0) {
		printf("# '%s' was accepted\n", text);
		return 0;
	}
	if (strstr(err, needle) == NULL)
		printf("# '%s': message '%s' lacks '%s'\n", text, err, needle);
	return strstr(err, needle) != NULL;
}

static int
accepted(const char *text)
{
	struct tensor_json j;

	open_text(&j, text, NULL);
	if (tensor_json_skip(&j) == 0 && tensor_json_end(&j) == 0)
		return 1;
	printf("# '%s': %s\n", text, err);
	return 0;
}

static void
test_values(void)
{
	struct tensor_json j;
	uint64_t u;

	UNIT_OK(string_is("\"a\\\"b\\\\c\\/d\\b\\f\\n\\r\\t\"",
	    "a\"b\\c/d\b\f\n\r\t"), "the two-character escapes");
	UNIT_OK(string_is("\"\\u00e9\\u20ac\"", "\xc3\xa9\xe2\x82\xac"),
	    "\\u escapes to two- and three-byte UTF-8");
	UNIT_OK(string_is("\"\\ud83d\\ude00\"", "\xf0\x9f\x98\x80"),
	    "a surrogate pair to one four-byte character");
	UNIT_OK(string_is("\"caf\xc3\xa9\"", "caf\xc3\xa9"),
	    "UTF-8 passes as it is");
	UNIT_OK(number_is("0", 0) && number_is("-0.5", -0.5) &&
	    number_is("1.5e3", 1500) && number_is("-2E-2", -0.02) &&
	    number_is("3.14159", 3.14159) && number_is("1e+2", 100),
	    "numbers: sign, fraction and exponent");
	UNIT_OK(number_is("1e-400", 0), "an underflowing number is 0");
	open_text(&j, "18446744073709551615", NULL);
	UNIT_OK(tensor_json_uint(&j, &u) == 0 && u == UINT64_MAX,
	    "the largest integer, 2^64 - 1");
	open_text(&j, "18446744073709551616", NULL);
	UNIT_OK(tensor_json_uint(&j, &u) < 0 && strstr(err, "too large"),
	    "2^64 is too large");
	open_text(&j, " [1, 2.5]", NULL);
	UNIT_OK(tensor_json_expect(&j, '[') == 0 &&
	    tensor_json_uint(&j, &u) == 0 && u == 1 &&
	    tensor_json_eat(&j, ',') && tensor_json_uint(&j, &u) < 0 &&
	    strstr(err, "integer"), "a fraction where an integer is wanted");
	open_text(&j, "null", NULL);
	UNIT_OK(tensor_json_null(&j) == 1 && tensor_json_end(&j) == 0, "null");
	open_text(&j, "nul", NULL);
	UNIT_OK(tensor_json_null(&j) == 0 && j.i == 0, "nul is not null");
	UNIT_OK(accepted(" {\"a\": [true, false, null, -1, \"x\", {}, []],\n"
	    "\t\"b\": {\"c\": {\"d\": 1e5}}} \r\n"),
	    "a document with every kind");
}

static void
test_refused(void)
{
	static const struct {
		const char *text, *needle, *what;
	} bad[] = {
		{ "[1, 2,]", "expected a value",
		    "a trailing comma in an array" },
		{ "{\"a\": 1,}", "expected a string",
		    "a trailing comma in an object" },
		{ "{'a': 1}", "expected a string", "single quotes" },
		{ "{\"a\" 1}", "expected ':'", "a missing colon" },
		{ "[1 2]", "expected ']'", "a missing comma" },
		{ "01", "bad number", "a leading zero" },
		{ "1.", "bad number", "a fraction without digits" },
		{ ".5", "expected a value",
		    "a number without an integer part" },
		{ "+1", "expected a value", "a plus sign" },
		{ "1e", "bad number", "an exponent without digits" },
		{ "NaN", "expected a value", "NaN" },
		{ "tru", "expected a value", "a cut word" },
		{ "\"a\tb\"", "control character", "a tab inside a string" },
		{ "\"abc", "unterminated", "an unterminated string" },
		{ "\"a\\", "unterminated", "a string ending in a backslash" },
		{ "\"\\x\"", "bad escape", "an unknown escape" },
		{ "\"\\u12\"", "bad \\u escape", "a short \\u escape" },
		{ "\"\\ud800\"", "lone surrogate", "a lone high surrogate" },
		{ "\"\\udc00\"", "lone surrogate", "a lone low surrogate" },
		{ "\"\\ud800\\u0041\"", "surrogate pair",
		    "a high surrogate before a non-surrogate" },
		{ "\"\\u0000\"", "NUL", "\\u0000" },
		{ "{} {}", "text after", "two values" },
		{ "", "found the end", "no value at all" },
		{ "[", "found the end", "an unclosed array" },
	};
	char deep[200];
	size_t i;
	int k;

	for (i = 0; i < sizeof bad / sizeof bad[0]; i++)
		UNIT_OK(refused(bad[i].text, bad[i].needle), bad[i].what);
	for (k = 0; k <= TENSOR_JSON_MAX_DEPTH; k++)
		deep[k] = '[';
	deep[k] = '\0';
	UNIT_OK(refused(deep, "nested too deeply"), "65 levels of nesting");
	for (k = 0; k < TENSOR_JSON_MAX_DEPTH; k++)
		deep[k] = '[', deep[TENSOR_JSON_MAX_DEPTH + k] = ']';
	deep[2 * TENSOR_JSON_MAX_DEPTH] = '\0';
	UNIT_OK(accepted(deep), "64 levels of nesting");
}

static void
test_limits(void)
{
	struct tensor_json j;
	char big[300];
	double v;

	open_text(&j, "1e400", NULL);
	UNIT_OK(tensor_json_number(&j, &v) < 0 && strstr(err, "out of range"),
	    "a number beyond a double's range");
	memset(big, '1', sizeof big - 1);
	big[sizeof big - 1] = '\0';
	open_text(&j, big, NULL);
	UNIT_OK(tensor_json_number(&j, &v) < 0 && strstr(err, "longer than"),
	    "a number of 299 digits");
	/* The text is the first three bytes: strtod must not see the 4. */
	tensor_json_init(&j, "1234", 3, NULL, err, sizeof err);
	UNIT_OK(tensor_json_number(&j, &v) == 0 && v == 123 &&
	    tensor_json_end(&j) == 0,
	    "a number at the end of a text without NUL");
	tensor_json_init(&j, "\"ab\"", 3, NULL, err, sizeof err);
	UNIT_OK(tensor_json_skip(&j) < 0 && strstr(err, "unterminated"),
	    "a string cut by the text's end");
	tensor_json_init(&j, "[1, 2] x", 6, NULL, err, sizeof err);
	UNIT_OK(tensor_json_skip(&j) == 0 && tensor_json_end(&j) == 0,
	    "bytes past the length are not read");
}

static void
test_where(void)
{
	struct tensor_json j;
	uint64_t u;

	open_text(&j, "{\"a\": 1, \"b\" 2}", NULL);
	UNIT_OK(tensor_json_skip(&j) < 0 &&
	    strcmp(err, "bad JSON at byte 13: expected ':'") == 0,
	    "inside another format: the byte offset");
	open_text(&j, "{\"a\": 1,\n \"b\": [\n  1,\n  ]\n}\n", "t.json");
	UNIT_OK(tensor_json_skip(&j) < 0 &&
	    strcmp(err, "t.json:4: expected a value") == 0,
	    "a file of its own: path and line");
	open_text(&j, "[1]\n\n", "t.json");
	UNIT_OK(tensor_json_skip(&j) == 0 && tensor_json_end(&j) == 0,
	    "blank lines after the value");
	open_text(&j, "[1]\n\nx", "t.json");
	UNIT_OK(tensor_json_skip(&j) == 0 && tensor_json_end(&j) < 0 &&
	    strcmp(err, "t.json:3: text after the JSON value") == 0,
	    "text after the value, on its line");
	open_text(&j, "{\"a\": 1}", "t.json");
	UNIT_OK(tensor_json_expect(&j, '{') == 0 &&
	    tensor_json_uint(&j, &u) < 0 &&
	    strcmp(err, "t.json:1: expected an integer") == 0,
	    "a reader's own failure names the line too");
}

/* A trace as collx-pipe writes it, pulled as its reader does: the "ts"
 * and "dur" of each complete ("X") event of traceEvents, every other
 * member skipped. */
struct events {
	double ts[4], dur[4];
	int n;
};

static int
pull_member(struct tensor_json *j, const char *key, int *isx, double *ts,
    double *dur)
{
	char *ph;

	if (strcmp(key, "ts") == 0)
		return tensor_json_number(j, ts);
	if (strcmp(key, "dur") == 0)
		return tensor_json_number(j, dur);
	if (strcmp(key, "ph") != 0)
		return tensor_json_skip(j);
	if (tensor_json_string(j, &ph) < 0)
		return -1;
	*isx = strcmp(ph, "X") == 0;
	free(ph);
	return 0;
}

static int
pull_event(struct tensor_json *j, struct events *ev)
{
	double ts = NAN, dur = NAN;
	int isx = 0, rc;
	char *key;

	if (tensor_json_expect(j, '{') < 0)
		return -1;
	do {
		if (tensor_json_string(j, &key) < 0)
			return -1;
		rc = tensor_json_expect(j, ':');
		if (rc == 0)
			rc = pull_member(j, key, &isx, &ts, &dur);
		free(key);
		if (rc < 0)
			return -1;
	} while (tensor_json_eat(j, ','));
	if (isx && ev->n < 4) {
		ev->ts[ev->n] = ts;
		ev->dur[ev->n++] = dur;
	}
	return tensor_json_expect(j, '}');
}

static int
pull_trace(struct tensor_json *j, struct events *ev)
{
	char *key;
	int rc;

	if (tensor_json_expect(j, '{') < 0)
		return -1;
	do {
		if (tensor_json_string(j, &key) < 0)
			return -1;
		rc = tensor_json_expect(j, ':');
		if (rc == 0 && strcmp(key, "traceEvents") != 0)
			rc = tensor_json_skip(j);
		else if (rc == 0 && (rc = tensor_json_expect(j, '[')) == 0) {
			do
				rc = pull_event(j, ev);
			while (rc == 0 && tensor_json_eat(j, ','));
			if (rc == 0)
				rc = tensor_json_expect(j, ']');
		}
		free(key);
		if (rc < 0)
			return -1;
	} while (tensor_json_eat(j, ','));
	if (tensor_json_expect(j, '}') < 0)
		return -1;
	return tensor_json_end(j);
}

static void
test_pull(void)
{
	static const char trace[] = "{\"traceEvents\": [\n"
	    " {\"name\": \"F0\", \"cat\": \"forward\", \"ph\": \"X\",\n"
	    "  \"pid\": 0, \"tid\": 1, \"ts\": 12.5, \"dur\": 3,\n"
	    "  \"args\": {\"mb\": [0]}},\n"
	    " {\"name\": \"stage 1\", \"ph\": \"M\", \"args\": {}},\n"
	    " {\"ph\": \"X\", \"ts\": 20, \"dur\": 0.25, \"cat\": \"send\"}\n"
	    "], \"displayTimeUnit\": \"ms\"}\n";
	struct events ev = { .n = 0 };
	struct tensor_json j;
	int rc;

	open_text(&j, trace, "t.json");
	rc = pull_trace(&j, &ev);
	UNIT_OK(rc == 0 && ev.n == 2 && ev.ts[0] == 12.5 && ev.dur[0] == 3 &&
	    ev.ts[1] == 20 && ev.dur[1] == 0.25,
	    "the two complete events of a trace");
	if (rc < 0)
		printf("# %s\n", err);
	ev.n = 0;
	open_text(&j, "{\"traceEvents\": [\n {\"ph\": \"X\", \"ts\": 1,\n"
	    "  \"dur\": }\n]}\n", "bad.json");
	UNIT_OK(pull_trace(&j, &ev) < 0 &&
	    strcmp(err, "bad.json:3: expected a number") == 0,
	    "a trace with a missing value: its line");
}

int
main(void)
{
	test_values();
	test_refused();
	test_limits();
	test_where();
	test_pull();
	return unit_done();
}
