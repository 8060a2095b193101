/* fillname: a fill's name (or number) to its enum tensor_fill and value. */
#include <stdlib.h>
#include <string.h>

#include "cli/util.h"
#include "tensor/fillname.h"

int
tensor_fill_parse(const char *s, enum tensor_fill *how, double *value,
    char *err, size_t errlen)
{
	static const struct {
		const char *name;
		enum tensor_fill how;
		double value;
	} names[] = {
		{ "zeros", TENSOR_FILL_CONST, 0 },
		{ "ones", TENSOR_FILL_CONST, 1 },
		{ "arange", TENSOR_FILL_ARANGE, 0 },
		{ "rand", TENSOR_FILL_RAND, 0 },
		{ "randn", TENSOR_FILL_RANDN, 0 },
	};
	char *end;
	size_t i;

	for (i = 0; i < sizeof names / sizeof names[0]; i++)
		if (strcmp(s, names[i].name) == 0) {
			*how = names[i].how;
			*value = names[i].value;
			return 0;
		}
	*value = strtod(s, &end);
	if (!*s || *end)
		return cli_fail(err, errlen, "expected zeros, ones, arange, "
		    "rand, randn or a number, not '%s'", s);
	*how = TENSOR_FILL_CONST;
	return 0;
}
