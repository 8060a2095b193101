# Writes OUT: the model tensors of A with the optimizer state (optim.*)
# of B, i.e. a checkpoint whose state is another model's.
import json, struct, sys
def rd(p):
    b = open(p, 'rb').read()
    n = struct.unpack('<Q', b[:8])[0]
    return json.loads(b[8:8 + n]), b[8 + n:]
(ha, da), (hb, db) = rd(sys.argv[1]), rd(sys.argv[2])
out, blob = {'__metadata__': ha['__metadata__']}, b''
for h, d, keep in ((ha, da, False), (hb, db, True)):
    for k, v in h.items():
        if k == '__metadata__' or k.startswith('optim.') != keep:
            continue
        s, e = v['data_offsets']
        out[k] = dict(v, data_offsets=[len(blob), len(blob) + e - s])
        blob += d[s:e]
hd = json.dumps(out).encode()
open(sys.argv[3], 'wb').write(struct.pack('<Q', len(hd)) + hd + blob)
