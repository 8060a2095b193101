/* setops: changes made to a whole tensor set: its metadata copied, every
 * tensor converted, a lone unnamed tensor named (collx-tensor convert,
 * split and cat). */
#include <string.h>

#include "cli/util.h"
#include "tensor/setops.h"

int
tensor_set_meta_copy(struct tensor_set *dst, const struct tensor_set *src,
    char *err, size_t errlen)
{
	size_t k;

	for (k = 0; k < src->nmeta; k++)
		if (tensor_set_meta_put(dst, src->meta[k].key,
		    src->meta[k].value, err, errlen) < 0)
			return -1;
	return 0;
}

int
tensor_set_cast(struct tensor_set *s, enum dtype dt, char *err, size_t errlen)
{
	struct tensor t;
	size_t i;

	for (i = 0; i < s->count; i++) {
		if (s->items[i].dtype == dt)
			continue;
		if (tensor_cast(&s->items[i], dt, &t, err, errlen) < 0)
			return -1;
		tensor_free(&s->items[i]);
		s->items[i] = t;
	}
	return 0;
}

int
tensor_set_name_unnamed(struct tensor_set *s, const char *name, char *err,
    size_t errlen)
{
	if (s->count != 1 || s->items[0].name)
		return 0;
	if (!(s->items[0].name = strdup(name)))
		return cli_fail(err, errlen, "out of memory");
	return 0;
}
