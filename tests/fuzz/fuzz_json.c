/* fuzz_json: the JSON reader (lib/tensor/json.c) on any text, which does
 * not end in NUL: a value is passed over or refused with a message, in
 * the byte form and the line form, and so is each typed read at its
 * start; nothing is read past the text. */
#include <stddef.h>
#include <stdint.h>
#include <stdlib.h>

#include "tensor/json.h"

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

static char err[512];

/* A failure always says why. */
static void
said(int rc)
{
	if (rc < 0 && err[0] == '\0')
		abort();
	err[0] = '\0';
}

int
LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
	struct tensor_json j;
	uint64_t u;
	double v;
	char *s;
	int rc;

	tensor_json_init(&j, data, size, NULL, err, sizeof err);
	rc = tensor_json_skip(&j);
	said(rc == 0 ? tensor_json_end(&j) : rc);
	tensor_json_init(&j, data, size, "f.json", err, sizeof err);
	said(tensor_json_number(&j, &v));
	j.i = 0;
	said(tensor_json_uint(&j, &u));
	j.i = 0;
	if ((rc = tensor_json_string(&j, &s)) == 0)
		free(s);
	said(rc);
	return 0;
}
