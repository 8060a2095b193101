#!/usr/bin/env bats
# collx-tensor: fixtures written by NumPy, round trips, malformed input,
# the generator against an independent Python version, diff, split/cat,
# pack/get, streams of .npy arrays, atomic output (the man page against
# --help: cli.bats).
load lib/common
bats_require_minimum_version 1.5.0

setup() {
	common_setup
	CT="timeout 60 collx-tensor"
}

teardown() {
	common_teardown
}

# One line on stderr, naming the file, and exit 3.
bad_input() {
	run --separate-stderr $CT info "$1"
	[ "$status" -eq 3 ] || { echo "status $status for $1: $stderr"; return 1; }
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ] || { echo "stderr: $stderr"; return 1; }
	[[ "$stderr" == collx-tensor:*"$1"* ]] || { echo "stderr: $stderr"; return 1; }
	[[ "$stderr" == *"$2"* ]] || { echo "stderr lacks '$2': $stderr"; return 1; }
}

# Safetensors bytes from a header text and a number of zero data bytes.
st_file() {
	"$PY" -c 'import struct,sys; h=sys.argv[2].encode(); open(sys.argv[1],"wb").write(struct.pack("<Q",len(h))+h+bytes(int(sys.argv[3])))' "$@"
}

@test "help and version for the program and every command" {
	run $CT --help
	[ "$status" -eq 0 ]
	[[ "$output" == usage:* ]]
	for c in info print create diff convert split cat pack get; do
		run $CT "$c" --help
		[ "$status" -eq 0 ]
		[[ "$output" == "usage: collx-tensor $c"* ]]
	done
	run $CT -V
	[ "$status" -eq 0 ]
	[[ "$output" == "collx-tensor (collx) "* ]]
}

@test "usage errors exit 2" {
	run $CT
	[ "$status" -eq 2 ]
	run $CT frobnicate
	[ "$status" -eq 2 ]
	run $CT create --shape 2 --fill sideways -o x.npy
	[ "$status" -eq 2 ]
	run $CT create --shape 2,-1 -o x.npy
	[ "$status" -eq 2 ]
	run $CT create --shape 2 --dtype c64 -o x.npy
	[ "$status" -eq 2 ]
	run $CT create --shape 2 --dtype i32 --fill rand -o x.npy
	[ "$status" -eq 2 ]
	run $CT split --parts 2 -o same.npy "$FIXTURES/arange_f4.npy"
	[ "$status" -eq 2 ]
	[ ! -e same.npy ]
}

@test "npy fixtures from NumPy: byte orders, Fortran order, versions 2 and 3" {
	run $CT print "$FIXTURES/arange_f4.npy"
	[ "$output" = $'[[0. 1. 2.]\n [3. 4. 5.]]' ]
	run $CT print "$FIXTURES/arange_f8_be.npy"
	[ "$output" = $'[[0. 1. 2.]\n [3. 4. 5.]]' ]
	run $CT print "$FIXTURES/arange_i4_be.npy"
	[ "$output" = '[-3 -2 -1  0  1  2]' ]
	run $CT print "$FIXTURES/arange_i2_fortran.npy"
	[ "$output" = $'[[ 0  1  2  3]\n [ 4  5  6  7]\n [ 8  9 10 11]]' ]
	run $CT print "$FIXTURES/arange_u1_v2.npy"
	[ "$output" = '[250 251 252 253 254 255]' ]
	run $CT print "$FIXTURES/arange_i1_v3.npy"
	[ "$output" = $'[[[-4 -3]\n  [-2 -1]]\n\n [[ 0  1]\n  [ 2  3]]]' ]
}

@test "Fortran-order 3-d data comes out in C order" {
	$CT convert "$FIXTURES/arange_f4_fortran_3d.npy" c.npy
	$CT create --shape 2,3,4 --fill arange -o want.npy
	cmp c.npy want.npy
}

@test "npy fixtures: bool, f16 (both orders), big i64, 0-d, empty" {
	run $CT print "$FIXTURES/bool.npy"
	[ "$output" = '[ True False  True  True]' ]
	run $CT print "$FIXTURES/f16.npy"
	[ "$output" = '[ 5.00e-01 -2.00e+00  6.55e+04       inf  5.96e-08]' ]
	run $CT print "$FIXTURES/f16_be.npy"
	[ "$output" = '[ 1.5  -0.25]' ]
	run $CT print "$FIXTURES/i8_big.npy"
	[ "$output" = '[ 4611686018427387905 -4611686018427387905]' ]
	run $CT print "$FIXTURES/scalar_i8.npy"
	[ "$output" = 7 ]
	run $CT info "$FIXTURES/scalar_i8.npy"
	[[ "$output" == *"i64    []"*" 8" ]]
	run $CT info "$FIXTURES/empty_f4.npy"
	[[ "$output" == *"f32    [0,3]"*" 0" ]]
	run $CT print "$FIXTURES/empty_f4.npy"
	[ "$output" = '[]' ]
}

@test "safetensors fixture: values, names in order, metadata" {
	run $CT info "$FIXTURES/model.safetensors"
	[ "$status" -eq 0 ]
	[[ "${lines[0]}" == *": safetensors, 4 tensors, 48 bytes" ]]
	[ "${lines[1]}" = "  metadata collx.arch = mlp" ]
	[ "${lines[2]}" = "  metadata format = pt" ]
	[[ "${lines[4]}" == "  b "*"f32"*"[2]"*" 8" ]]
	[[ "${lines[5]}" == "  flag "*"bool"*"[2]"*" 2" ]]
	[[ "${lines[6]}" == "  h "*"bf16"*"[3]"*" 6" ]]
	[[ "${lines[7]}" == "  w "*"i64"*"[2,2]"*" 32" ]]
	run $CT print "$FIXTURES/model.safetensors"
	[ "$output" = $'b: f32 [2]\n[ 1.5 -2. ]\nflag: bool [2]\n[ True False]\nh: bf16 [3]\n[ 1.   2.  -0.5]\nw: i64 [2, 2]\n[[0 1]\n [2 3]]' ]
}

@test "safetensors output: name order, contiguous offsets, padded header, metadata kept" {
	$CT convert "$FIXTURES/model.safetensors" out.safetensors
	run "$PY" -c '
import json, struct, sys
b = open("out.safetensors", "rb").read()
n = struct.unpack("<Q", b[:8])[0]
h = b[8:8 + n]
assert n % 8 == 0 and h.rstrip(b" ").endswith(b"}"), n
d = json.loads(h)
keys = list(d)
assert keys[0] == "__metadata__" and d["__metadata__"] == {"collx.arch": "mlp", "format": "pt"}
assert keys[1:] == sorted(keys[1:]) == ["b", "flag", "h", "w"], keys
off = 0
for k in keys[1:]:
    s, e = d[k]["data_offsets"]
    assert s == off, (k, s, off)
    off = e
assert off == len(b) - 8 - n
print("ok")'
	[ "$output" = ok ]
	$CT convert out.safetensors again.safetensors
	cmp out.safetensors again.safetensors
}

@test "NumPy reads what create writes: every npy dtype, byte for byte" {
	need python3-numpy "$PY" -c "import numpy"
	for dt in f32 f64 f16 i8 i16 i32 i64 u8 bool; do
		$CT create --shape 2,3,4 --dtype "$dt" --fill arange -o "$dt.npy"
	done
	run "$PY" -c '
import numpy as np, io
names = {"f32": "f4", "f64": "f8", "f16": "f2", "i8": "i1", "i16": "i2",
         "i32": "i4", "i64": "i8", "u8": "u1", "bool": "?"}
for ours, code in names.items():
    want = io.BytesIO()
    np.save(want, np.arange(24).astype(code).reshape(2, 3, 4))
    got = open(ours + ".npy", "rb").read()
    assert got == want.getvalue(), ours
print("ok")'
	[ "$output" = ok ]
}

@test "round trips through safetensors and back for every dtype and ndim 0..8" {
	for dt in f32 f64 f16 bf16 i8 i16 i32 i64 u8 bool; do
		shape=
		for nd in 0 1 2 3 4 5 6 7 8; do
			$CT create --shape "$shape" --dtype "$dt" --fill arange -o a.safetensors
			$CT convert a.safetensors b.safetensors
			cmp a.safetensors b.safetensors
			if [ "$dt" != bf16 ]; then
				$CT convert a.safetensors a.npy
				$CT convert a.npy c.safetensors
				cmp a.safetensors c.safetensors
			fi
			shape=${shape:+$shape,}$((nd % 3 + 1))
		done
	done
}

@test "bf16 to .npy is refused with a hint; --dtype f32 converts" {
	$CT create --shape 3 --dtype bf16 --fill arange -o b.safetensors
	echo keep > out.npy
	run --separate-stderr $CT convert b.safetensors out.npy
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"bf16 has no .npy type code"* ]]
	[ "$(cat out.npy)" = keep ]
	$CT convert --dtype f32 b.safetensors out.npy
	run $CT print out.npy
	[ "$output" = '[0. 1. 2.]' ]
}

@test "malformed npy: each one line, exit 3" {
	head -c 70 "$FIXTURES/arange_f4.npy" > trunc_header.npy
	bad_input trunc_header.npy "truncated"
	head -c 140 "$FIXTURES/arange_f4.npy" > trunc_data.npy
	bad_input trunc_data.npy "truncated"
	printf 'hello, I am not a tensor at all' > magic.npy
	bad_input magic.npy "not a .npy or .safetensors"
	: > empty.npy
	bad_input empty.npy "empty"
	hdr() { "$PY" -c 'import sys; h=sys.argv[1].encode(); sys.stdout.buffer.write(b"\x93NUMPY\x01\x00"+bytes([len(h),0])+h+b"\0"*int(sys.argv[2]))' "$@"; }
	hdr "{'descr': '<f4', 'fortran_order': False, 'shape': (-2,), }" 8 > neg.npy
	bad_input neg.npy "negative dimension"
	hdr "{'descr': '<f4', 'fortran_order': False, 'shape': (4611686018427387904, 4), }" 8 > ovf.npy
	bad_input ovf.npy "overflow"
	hdr "{'descr': '<f4', 'fortran_order': False, 'shape': (1000000000000,), }" 8 > lying.npy
	bad_input lying.npy "truncated"
	hdr "{'descr': '<U8', 'fortran_order': False, 'shape': (1,), }" 32 > str.npy
	bad_input str.npy "unsupported .npy dtype"
	hdr "{'descr': '<f4', 'fortran_order': False, 'shape': (1,), }" 9 > trail.npy
	bad_input trail.npy "trailing"
	hdr "{'descr': '<f4' 'shape': (1,)}" 4 > syntax.npy
	bad_input syntax.npy "bad .npy header"
	mkdir adir
	bad_input adir "is a directory"
	bad_input missing.npy "No such file"
}

@test "malformed safetensors: each one line, exit 3" {
	T1='"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}'
	st_file ok.safetensors "{$T1}" 8
	run $CT info ok.safetensors
	[ "$status" -eq 0 ]
	"$PY" -c 'import struct; open("huge.safetensors","wb").write(struct.pack("<Q", 1 << 40) + b"{}")'
	bad_input huge.safetensors "exceeds the 100000000-byte limit"
	"$PY" -c 'import struct; open("past.safetensors","wb").write(struct.pack("<Q", 4096) + b"{}")'
	bad_input past.safetensors "past the end"
	st_file trunc.safetensors "{$T1}" 5
	bad_input trunc.safetensors "out of range"
	st_file trailing.safetensors "{$T1}" 12
	bad_input trailing.safetensors "trailing bytes"
	st_file json.safetensors '{"a":{"dtype":"F32","shape":[2],"data_offsets":[0,8]}' 8
	bad_input json.safetensors "bad JSON at byte 53: expected '}'"
	st_file dtype.safetensors '{"a":{"dtype":"F8_E4M3","shape":[2],"data_offsets":[0,2]}}' 2
	bad_input dtype.safetensors "unknown dtype 'F8_E4M3'"
	st_file dup.safetensors "{$T1,$T1}" 8
	bad_input dup.safetensors "duplicate tensor name 'a'"
	st_file neg.safetensors '{"a":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}}' 8
	bad_input neg.safetensors "negative"
	st_file ovf.safetensors '{"a":{"dtype":"F64","shape":[4294967296,4294967296],"data_offsets":[0,8]}}' 8
	bad_input ovf.safetensors "overflow"
	st_file hole.safetensors '{"a":{"dtype":"U8","shape":[1],"data_offsets":[0,1]},"b":{"dtype":"U8","shape":[1],"data_offsets":[2,3]}}' 3
	bad_input hole.safetensors "hole"
	st_file overlap.safetensors '{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[1],"data_offsets":[1,2]}}' 2
	bad_input overlap.safetensors "overlap"
	st_file span.safetensors '{"a":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}}' 8
	bad_input span.safetensors "needs 12 bytes"
	st_file meta.safetensors '{"__metadata__":{"k":["v"]}}' 0
	bad_input meta.safetensors "not a string"
}

@test "fuzzer-found inputs (tests/fixtures/regressions): one line, exit 3, no crash" {
	# Each file once crashed a reader under ASan/UBSan (make check
	# SANITIZE=address,undefined runs this against that build).
	n=0
	for f in "$FIXTURES"/regressions/*; do
		bad_input "$f" ""
		n=$((n + 1))
	done
	[ "$n" -ge 2 ]
}

@test "the readers are memory-clean on every fixture, seed and regression (valgrind)" {
	# A sanitizer build checks itself (ASan aborts on the first error);
	# valgrind checks the plain build.
	local vg=() f n=0
	if ! ldd "$COLLX_BIN/collx-tensor" | grep -q libasan; then
		need valgrind valgrind --version
		vg=(valgrind -q --error-exitcode=99 --leak-check=full
		    --errors-for-leak-kinds=definite)
	fi
	for f in "$FIXTURES"/*.npy "$FIXTURES"/*.safetensors "$FIXTURES"/regressions/* \
	    "$COLLX_ROOT"/tests/fuzz/corpus/fuzz_safetensors/* \
	    "$COLLX_ROOT"/tests/fuzz/corpus/fuzz_npy/*.npys; do
		run timeout 60 "${vg[@]}" "$COLLX_BIN/collx-tensor" print "$f"
		# 0 read, 3 refused as bad input; 99 (valgrind) or a crash fail
		[ "$status" -eq 0 ] || [ "$status" -eq 3 ] ||
		    { echo "$f: exit $status: $output"; return 1; }
		n=$((n + 1))
	done
	[ "$n" -ge 20 ]
}

@test "standard input and output, format kept" {
	$CT create --shape 4 --fill arange -o - | $CT convert - - > piped.npy
	run $CT print piped.npy
	[ "$output" = '[0. 1. 2. 3.]' ]
	$CT convert "$FIXTURES/model.safetensors" - | $CT info - > info.txt
	grep -q 'safetensors, 4 tensors' info.txt
}

@test "rand and randn: same seed same bytes, values of an independent Python version" {
	$CT create --shape 5 --dtype f64 --fill rand --seed 12345 -o r1.npy
	$CT create --shape 5 --dtype f64 --fill rand --seed 12345 -o r2.npy
	$CT create --shape 5 --dtype f64 --fill rand --seed 12346 -o r3.npy
	cmp r1.npy r2.npy
	if cmp -s r1.npy r3.npy; then false; fi
	$CT create --shape 5 --dtype f64 --fill randn --seed 7 -o n.npy
	$CT create --shape 5 --dtype f32 --fill rand --seed 12345 -o r32.npy
	run "$PY" - <<'EOF'
import math, struct
M = (1 << 64) - 1
def splitmix(x):
    while True:
        x = (x + 0x9e3779b97f4a7c15) & M
        z = x
        z = ((z ^ (z >> 30)) * 0xbf58476d1ce4e5b9) & M
        z = ((z ^ (z >> 27)) * 0x94d049bb133111eb) & M
        yield z ^ (z >> 31)
def rotl(x, k):
    return ((x << k) | (x >> (64 - k))) & M
def xoshiro(seed):
    g = splitmix(seed)
    s = [next(g) for _ in range(4)]
    while True:
        r = (rotl((s[1] * 5) & M, 7) * 9) & M
        t = (s[1] << 17) & M
        s[2] ^= s[0]; s[3] ^= s[1]; s[1] ^= s[2]; s[0] ^= s[3]; s[2] ^= t
        s[3] = rotl(s[3], 45)
        yield r
def ln(x):
    f, k = math.frexp(x)
    if f < float.fromhex("0x1.6a09e667f3bcdp-1"):
        f *= 2; k -= 1
    t = (f - 1) / (f + 1); q = t * t; p = 1.0 / 23
    for j in range(10, -1, -1):
        p = p * q + 1.0 / (2 * j + 1)
    return k * float.fromhex("0x1.62e42fefa39efp-1") + 2 * t * p
def load(name, fmt):
    b = open(name, "rb").read()
    n = b[8] | b[9] << 8
    data = b[10 + n:]
    return list(struct.unpack("<%d%s" % (len(data) // struct.calcsize(fmt), fmt), data))
g = xoshiro(12345)
want = [(next(g) >> 11) * 2.0 ** -53 for _ in range(5)]
assert load("r1.npy", "d") == want, (load("r1.npy", "d"), want)
g = xoshiro(12345)
want = [(next(g) >> 40) * 2.0 ** -24 for _ in range(5)]
assert load("r32.npy", "f") == want
g = xoshiro(7)
want = []
while len(want) < 5:
    u = 2 * ((next(g) >> 11) * 2.0 ** -53) - 1
    v = 2 * ((next(g) >> 11) * 2.0 ** -53) - 1
    s = u * u + v * v
    if s >= 1 or s == 0:
        continue
    m = math.sqrt(-2 * ln(s) / s)
    want += [u * m, v * m]
assert load("n.npy", "d") == want[:5], (load("n.npy", "d"), want)
print("ok")
EOF
	[ "$output" = ok ]
}

@test "randn statistics and rand range on a large draw" {
	$CT create --shape 100000 --dtype f32 --fill randn --seed 3 -o n.npy
	$CT create --shape 100000 --dtype f16 --fill rand --seed 3 -o u.npy
	run "$PY" -c '
import struct
b = open("n.npy", "rb").read(); n = b[8] | b[9] << 8
v = struct.unpack("<100000f", b[10 + n:])
m = sum(v) / len(v); var = sum((x - m) ** 2 for x in v) / len(v)
assert abs(m) < 0.02 and abs(var - 1) < 0.02, (m, var)
b = open("u.npy", "rb").read(); n = b[8] | b[9] << 8
u = struct.unpack("<100000e", b[10 + n:])
assert min(u) >= 0 and max(u) < 1 and abs(sum(u) / len(u) - 0.5) < 0.01
print("ok")'
	[ "$output" = ok ]
}

@test "create: constants, nan, saturation, names" {
	$CT create --shape 3 --dtype i8 --fill 300 -o sat.npy
	run $CT print sat.npy
	[ "$output" = '[127 127 127]' ]
	$CT create --shape 2 --fill nan -o nan.npy
	run $CT print nan.npy
	[ "$output" = '[nan nan]' ]
	$CT create --shape 2 --fill -1.25 --name bias -o b.safetensors
	run $CT print b.safetensors
	[ "$output" = $'bias: f32 [2]\n[-1.25 -1.25]' ]
}

# Python with the collective suites' helpers (tests/lib/collpy.py).
py() {
	timeout 60 "$PY" -c "import sys; sys.path.insert(0, '$COLLX_ROOT/tests/lib')
from collpy import *
$1"
}

@test "what a --stream run writes (.npys): info lists each array, print, get, diff and convert read it" {
	# Each rank's input: three arrays of different shapes and dtypes,
	# written by NumPy one after another.
	py "
for r in range(2):
    write_stream(f'in.{r}', [np.arange(2, dtype='f4') + r,
        (np.arange(6, dtype='i4').reshape(3, 2) - 2) * (r + 1),
        np.full((2, 2, 1), 0.25 * (r + 1), dtype='f8')])"
	timeout 60 collx-run -n 2 -- collx-allreduce --stream -i 'in.{rank}' \
	    -o 'out.{rank}.npys'
	# What NumPy reads there, and what info and print must say of it.
	py "
a, b = load_stream('in.0'), load_stream('in.1')
got = load_stream('out.0.npys')
assert len(got) == 3
for k in range(3): same(got[k], a[k] + b[k], f'array {k}')
names = {'float32': 'f32', 'int32': 'i32', 'float64': 'f64'}
rows = ['out.0.npys: npy stream, 3 tensors, %d bytes' % sum(x.nbytes for x in got),
    '  index  dtype  shape            bytes']
text = []
for k, x in enumerate(got):
    rows.append('  %-5d  %-5s  %-16s %d' % (k, names[str(x.dtype)],
        '[' + ','.join(map(str, x.shape)) + ']', x.nbytes))
    text.append('%d: %s [%s]' % (k, names[str(x.dtype)], ', '.join(map(str, x.shape))))
    text.append(str(x))
open('want.info', 'w').write('\n'.join(rows) + '\n')
open('want.print', 'w').write('\n'.join(text) + '\n')"
	run --separate-stderr $CT info out.0.npys
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	diff want.info - <<<"$output"
	run --separate-stderr $CT print out.0.npys
	[ "$status" -eq 0 ] || { echo "$stderr"; false; }
	diff want.print - <<<"$output"
	# get by index; diff of the two ranks' results, array by array
	$CT get -o one.npy out.0.npys 1
	py "same(load('one.npy'), load_stream('out.0.npys')[1])"
	run $CT diff out.0.npys out.1.npys
	[ "$status" -eq 0 ]
	[ "${#lines[@]}" -eq 3 ]
	[[ "${lines[2]}" == "2: max abs error 0,"* ]]
	# convert: to .safetensors (named by index) and back to a stream
	$CT convert out.0.npys s.safetensors
	$CT convert s.safetensors back.npys
	py "
st, _ = load_st('s.safetensors')
got = load_stream('out.0.npys')
assert sorted(st) == ['0', '1', '2'], sorted(st)
for k in range(3): same(st[str(k)], got[k], f'tensor {k}')
back = load_stream('back.npys')
assert len(back) == 3
for k in range(3): same(back[k], got[k], f'array {k}')"
	run $CT convert out.0.npys x.npy
	[ "$status" -eq 3 ]
	[[ "$output" == *"not 3 (use .safetensors or .npys)"* ]]
}

@test "a stream of concatenated .npy files; one cut short or followed by junk is refused" {
	$CT create --shape 2 --fill 1 -o a.npy
	$CT create --shape 3 --dtype i8 --fill arange -o b.npy
	cat a.npy b.npy a.npy >s.npys
	py "
got = load_stream('s.npys')
same(got[0], load('a.npy')); same(got[1], load('b.npy')); same(got[2], load('a.npy'))
assert got[1].dtype == np.int8
print(sum(x.nbytes for x in got))" >bytes
	run $CT info s.npys
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "s.npys: npy stream, 3 tensors, $(cat bytes) bytes" ]
	[ "${lines[3]}" = "  1      i8     [3]              3" ]
	# one array is a .npy file, whatever the name
	cp a.npy one.npys
	run $CT info one.npys
	[ "${lines[0]}" = "one.npys: npy, 1 tensor, 8 bytes" ]
	# the second array cut short, then junk after a whole one
	head -c $(($(stat -c %s a.npy) + 100)) s.npys >cut.npys
	bad_input cut.npys "array 1 (byte $(stat -c %s a.npy)): truncated"
	{ cat a.npy b.npy; printf 'junk'; } >junk.npys
	bad_input junk.npys "4 trailing bytes after the data of array 1"
	# a program that reads one array says what the file is
	run timeout 30 collx-allreduce -i s.npys
	[ "$status" -eq 3 ]
	[[ "$output" == *"trailing bytes after the data (more arrays follow: a .npy stream"* ]]
}

@test "diff: f32 results apart only by rounding get a hint with the --rtol that accepts them" {
	# b: float32 sums in one order; a: the same sums in float64, rounded once
	"$PY" -c "
import numpy as np
rng = np.random.default_rng(7)
x = rng.standard_normal((200, 50)).astype(np.float32)
b = np.zeros(200, dtype=np.float32)
for k in range(50): b += x[:, k]
a = x.astype(np.float64).sum(axis=1).astype(np.float32)
keep = np.abs(b) > 0.5
np.save('a.npy', a[keep]); np.save('b.npy', b[keep])
r = np.max(np.abs(a[keep].astype(np.float64) - b[keep]) / np.abs(b[keep]))
assert 1e-8 < r < 1e-5, r
open('want', 'w').write('%g' % 10 ** np.ceil(np.log10(r)))"
	run $CT diff --rtol 0 --atol 0 a.npy b.npy
	[ "$status" -eq 4 ]
	[[ "${lines[1]}" == "hint: differences at f32 rounding level (max rel error "*"); --rtol $(cat want) accepts them" ]]
	run $CT diff --rtol "$(cat want)" --atol 0 a.npy b.npy
	[ "$status" -eq 0 ]
	# a real difference, or f64, gets no hint
	"$PY" -c "
import numpy as np
b = np.load('b.npy'); a = b.copy(); a[3] *= 1.01
np.save('c.npy', a); np.save('d.npy', b.astype('f8')); np.save('e.npy', (b * (1 + 1e-7)).astype('f8'))"
	run $CT diff --rtol 0 --atol 0 c.npy b.npy
	[ "$status" -eq 4 ]
	[[ "$output" != *hint* ]]
	run $CT diff --rtol 0 --atol 0 e.npy d.npy
	[ "$status" -eq 4 ]
	[[ "$output" != *hint* ]]
}

@test "--dtype float is f64 as in NumPy; float32 and f32 are f32" {
	$CT create --shape 2 --dtype float --fill 1 -o f.npy
	$CT create --shape 2 --dtype float32 --fill 1 -o g.npy
	$CT create --shape 2 --dtype f32 --fill 1 -o h.npy
	"$PY" -c "
import numpy as np
assert np.load('f.npy').dtype == np.dtype(float) == np.float64
assert np.load('g.npy').dtype == np.float32 and np.load('h.npy').dtype == np.float32"
}

@test "diff: equal, within and outside tolerance, shapes, dtypes, names" {
	$CT create --shape 2,3 --fill arange -o a.npy
	$CT create --shape 2,3 --fill arange -o b.npy
	run --separate-stderr $CT diff a.npy b.npy
	[ "$status" -eq 0 ]
	[ "$output" = "max abs error 0, max rel error 0, 0 of 6 out of tolerance" ]
	$CT create --shape 2,3 --fill 1 -o ones.npy
	$CT create --shape 2,3 --fill 1.000005 -o near.npy
	run $CT diff near.npy ones.npy
	[ "$status" -eq 0 ]
	run $CT diff --rtol 1e-6 near.npy ones.npy
	[ "$status" -eq 4 ]
	[[ "$output" == *"6 of 6 out of tolerance"* ]]
	run --separate-stderr $CT diff --rtol 0 --atol 2.5 a.npy ones.npy
	[ "$status" -eq 4 ]
	[[ "$output" == "max abs error 4, max rel error 4, 2 of 6 out of tolerance" ]]
	[[ "$stderr" == "collx-tensor: a.npy and ones.npy differ: 2 of 6 elements out of tolerance"* ]]
	run $CT diff -q --rtol 0 --atol 2.5 a.npy ones.npy
	[ "$status" -eq 4 ]
	[[ "$output" != *"max abs"* ]]
	$CT create --shape 3,2 --fill arange -o t.npy
	run $CT diff a.npy t.npy
	[ "$status" -eq 4 ]
	[[ "$output" == *"shapes differ"* ]]
	$CT create --shape 2,3 --dtype f64 --fill arange -o d.npy
	run $CT diff a.npy d.npy
	[ "$status" -eq 4 ]
	[[ "$output" == *"dtypes differ"* ]]
	$CT create --shape 2 --fill nan -o n1.npy
	run $CT diff n1.npy n1.npy
	[ "$status" -eq 0 ]
	$CT pack -o s1.safetensors x=a.npy y=ones.npy
	$CT pack -o s2.safetensors x=a.npy y=ones.npy
	$CT pack -o s3.safetensors x=a.npy z=ones.npy
	run $CT diff s1.safetensors s2.safetensors
	[ "$status" -eq 0 ]
	[ "${lines[0]}" = "x: max abs error 0, max rel error 0, 0 of 6 out of tolerance" ]
	run $CT diff s1.safetensors s3.safetensors
	[ "$status" -eq 4 ]
	[[ "$output" == *"y: only in the first file"* ]]
}

@test "split (array_split sizes) and cat give back the input" {
	$CT create --shape 3,10,2 --dtype i32 --fill arange -o a.npy
	$CT split --parts 3 --dim 1 -o 'p{i}.npy' a.npy
	run $CT info p0.npy p1.npy p2.npy
	[[ "$output" == *"[3,4,2]"*"[3,3,2]"*"[3,3,2]"* ]]
	$CT cat --dim 1 -o back.npy p0.npy p1.npy p2.npy
	cmp a.npy back.npy
	$CT split --parts 2 --dim -1 -o 'q{i}.npy' a.npy
	$CT cat --dim 2 -o back2.npy q0.npy q1.npy
	cmp a.npy back2.npy
	run $CT print p2.npy
	[ "${lines[0]}" = '[[[14 15]' ]
	run --separate-stderr $CT split --parts 3 --even -o 'e{i}.npy' a.npy
	[ "$status" -eq 0 ]
	run --separate-stderr $CT split --parts 4 --dim 1 --even -o 'e{i}.npy' a.npy
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"not divisible"* ]]
	run $CT split --parts 2 --dim 3 -o 'e{i}.npy' a.npy
	[ "$status" -eq 3 ]
}

@test "split and cat of a safetensors set keep names and metadata" {
	$CT create --shape 4,2 --fill arange -o w.npy
	$CT create --shape 4 --dtype i64 --fill arange -o b.npy
	$CT pack --meta collx.arch=mlp -o m.safetensors w=w.npy b=b.npy
	$CT split --parts 2 -o 'm{i}.safetensors' m.safetensors
	run $CT info m1.safetensors
	[[ "$output" == *"metadata collx.arch = mlp"*"b "*"[2]"*"w "*"[2,2]"* ]]
	$CT cat -o back.safetensors m0.safetensors m1.safetensors
	cmp m.safetensors back.safetensors
	run $CT cat -o x.npy w.npy m0.safetensors
	[ "$status" -eq 3 ]
	$CT create --shape 4,3 -o w3.npy
	run --separate-stderr $CT cat -o x.npy w.npy w3.npy
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"dimension 1"* ]]
}

@test "pack and get" {
	$CT create --shape 2,2 --fill arange -o a.npy
	$CT create --shape 3 --dtype u8 --fill 9 -o b.npy
	$CT pack --meta k=v --meta x=y -o m.bin zed=a.npy alpha=b.npy
	run $CT info m.bin
	[[ "${lines[0]}" == *"safetensors, 2 tensors"* ]]
	[ "${lines[1]}" = "  metadata k = v" ]
	[[ "${lines[4]}" == "  alpha "* ]]
	$CT get -o a2.npy m.bin zed
	cmp a.npy a2.npy
	$CT get -o b2.safetensors m.bin alpha
	run $CT print b2.safetensors
	[ "$output" = $'alpha: u8 [3]\n[9 9 9]' ]
	run --separate-stderr $CT get -o x.npy m.bin nothere
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"no tensor named 'nothere'"* ]]
	run $CT pack -o d.safetensors a=a.npy a=b.npy
	[ "$status" -eq 2 ]
	run $CT pack -o d.safetensors a=m.bin
	[ "$status" -eq 3 ]
	run $CT pack -o d.safetensors novalue
	[ "$status" -eq 2 ]
}

@test "options may follow the file arguments, as in the man page's synopses" {
	$CT create --shape 2,2 --fill arange -o a.npy
	$CT pack zed=a.npy -o m.safetensors
	run $CT info m.safetensors
	[[ "${lines[0]}" == *"safetensors, 1 tensors"* || "${lines[0]}" == *"safetensors, 1 tensor"* ]]
	$CT get m.safetensors zed -o z.npy
	cmp a.npy z.npy
	$CT create --shape 2,2 --fill 1 -o b.npy
	run $CT diff a.npy b.npy --atol 3
	[ "$status" -eq 0 ]
	run $CT diff a.npy b.npy --atol 1
	[ "$status" -eq 4 ]
}

@test "an output that is a FIFO or device is written in place, never replaced" {
	mkfifo f
	timeout 20 cat f >got.npy &
	$CT create --shape 3 --fill 1 -o f
	wait
	[ -p f ]
	$CT create --shape 3 --fill 1 -o want.npy
	cmp got.npy want.npy
	$CT create --shape 3 --fill 1 -o /dev/null
	[ -c /dev/null ]
}

@test "{rank} and {world} in file names" {
	COLLX_RANK=1 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:9 \
		$CT create --shape 2 --fill 1 -o 'x{rank}of{world}.npy'
	[ -f x1of2.npy ]
	COLLX_RANK=1 COLLX_WORLD_SIZE=2 COLLX_MASTER=127.0.0.1:9 $CT info 'x{rank}of{world}.npy'
}

@test "outputs are atomic: a failed write leaves nothing behind" {
	run --separate-stderr $CT create --shape 2 -o nodir/x.npy
	[ "$status" -eq 1 ]
	[[ "$stderr" == "collx-tensor: nodir/x.npy: "* ]]
	$CT create --shape 2 --fill 5 -o keep.npy
	cp keep.npy before.npy
	run $CT convert "$FIXTURES/model.safetensors" keep.npy
	[ "$status" -eq 3 ]
	cmp keep.npy before.npy
	[ "$(ls -A | grep -c '^\.')" -eq 0 ]
	chmod 555 .
	if [ "$(id -u)" -ne 0 ]; then
		run $CT create --shape 2 -o ro.npy
		[ "$status" -eq 1 ]
	fi
	chmod 755 .
	$CT create --shape 2 -o perm.npy
	[ "$(stat -c %a perm.npy)" = "$(printf '%o' $((0666 & ~$(umask))))" ]
}

@test "print summarises like numpy past the threshold" {
	$CT create --shape 40,50 --dtype i32 --fill arange -o big.npy
	run $CT print big.npy
	[ "${lines[0]}" = '[[   0    1    2 ...   47   48   49]' ]
	[ "${lines[3]}" = ' ...' ]
	[ "${lines[6]}" = ' [1950 1951 1952 ... 1997 1998 1999]]' ]
	run $CT print --threshold 5000 big.npy
	[ "${#lines[@]}" -gt 40 ]
	"$PY" -c 'import struct; h=b"{'"'descr': '<f8', 'fortran_order': False, 'shape': (3,), }"'"; open("sevenths.npy","wb").write(b"\x93NUMPY\x01\x00"+bytes([len(h),0])+h+struct.pack("<3d",0,1/7,2/7))'
	run $CT print --precision 3 sevenths.npy
	[ "$output" = '[0.    0.143 0.286]' ]
	run $CT print sevenths.npy
	[ "$output" = '[0.         0.14285714 0.28571429]' ]
	run $CT print --edgeitems 1 big.npy
	[ "$output" = $'[[   0 ...   49]\n ...\n [1950 ... 1999]]' ]
}

@test "print agrees with numpy's str() on assorted arrays" {
	need python3-numpy "$PY" -c "import numpy"
	run "$PY" - "$(command -v collx-tensor)" <<'EOF'
import numpy as np, subprocess, sys
rng = np.random.default_rng(1)
cases = [rng.standard_normal((4, 5, 6)).astype(np.float16),
         np.array([0.5, 0.25, 1.0, -3.125], dtype=np.float32),
         np.array([1e-5, 1.0, 2.0]), np.array([1e10, 2.5e10]),
         np.array([np.nan, 1.5, -np.inf], dtype=np.float32),
         np.arange(30) / 7, np.arange(100, dtype=np.int32),
         rng.random(7).astype(np.float32),
         np.arange(2000, dtype=np.float32).reshape(20, 100) / 3,
         np.arange(2 * 3 * 400, dtype=np.int64).reshape(2, 3, 400)]
bad = 0
for i, a in enumerate(cases):
    np.save("c.npy", a)
    got = subprocess.run([sys.argv[1], "print", "c.npy"], capture_output=True,
                         text=True, timeout=60).stdout
    if got != str(a) + "\n":
        bad += 1
        print("case", i, repr(got), repr(str(a)))
print("bad", bad)
EOF
	[ "$output" = "bad 0" ]
}
