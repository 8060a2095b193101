#!/usr/bin/env bats
# Tensor inputs from URLs: a local HTTP server (Python's http.server with a
# few extra paths: a 503 that clears on retry, one that never answers),
# file:// URLs, refused connections, and timeouts.
load lib/common
bats_require_minimum_version 1.5.0

setup_file() {
	export WWW=$BATS_FILE_TMPDIR/www
	mkdir -p "$WWW"
	cp "$FIXTURES/arange_f4.npy" "$FIXTURES/model.safetensors" "$WWW/"
	cat > "$BATS_FILE_TMPDIR/server.py" <<'EOF'
import http.server, os, sys, time
hits = {}
class H(http.server.SimpleHTTPRequestHandler):
    def log_message(self, *a):
        pass
    def do_GET(self):
        hits[self.path] = hits.get(self.path, 0) + 1
        with open(os.path.join(sys.argv[2], "hits"), "a") as f:
            f.write(self.path + "\n")
        if self.path == "/flaky.npy" and hits[self.path] == 1:
            return self.send_error(503)
        if self.path == "/broken.npy":
            return self.send_error(500)
        if self.path == "/hang.npy":
            time.sleep(30)
            return
        if self.path == "/flaky.npy":
            self.path = "/arange_f4.npy"
        return super().do_GET()
os.chdir(sys.argv[2])
http.server.ThreadingHTTPServer.daemon_threads = True
http.server.ThreadingHTTPServer(("127.0.0.1", int(sys.argv[1])), H).serve_forever()
EOF
	export PORT=$(free_port)
	"$PY" "$BATS_FILE_TMPDIR/server.py" "$PORT" "$WWW" 3>&- &
	echo $! > "$BATS_FILE_TMPDIR/server.pid"
	for _ in $(seq 100); do
		"$PY" -c 'import socket,sys; socket.create_connection(("127.0.0.1", int(sys.argv[1])), 1)' \
			"$PORT" 2>/dev/null && return 0
		sleep 0.1
	done
	echo "HTTP server did not start" >&2
	return 1
}

teardown_file() {
	kill "$(cat "$BATS_FILE_TMPDIR/server.pid")" 2>/dev/null || true
}

setup() {
	common_setup
	CT="timeout 60 collx-tensor"
	URL=http://127.0.0.1:$PORT
}

teardown() {
	common_teardown
}

@test "http: a .npy and a .safetensors read like local files" {
	run $CT print "$URL/arange_f4.npy"
	[ "$status" -eq 0 ]
	[ "$output" = $'[[0. 1. 2.]\n [3. 4. 5.]]' ]
	$CT convert "$URL/model.safetensors" m.safetensors
	$CT convert "$FIXTURES/model.safetensors" local.safetensors
	cmp m.safetensors local.safetensors
	run $CT diff "$URL/arange_f4.npy" "$FIXTURES/arange_f4.npy"
	[ "$status" -eq 0 ]
}

@test "http 404: exit 3, one line with the status and the URL" {
	run --separate-stderr $CT info "$URL/nothere.npy"
	[ "$status" -eq 3 ]
	[ "$stderr" = "collx-tensor: $URL/nothere.npy: HTTP status 404" ]
}

@test "http 503 is retried once and then succeeds" {
	run $CT print "$URL/flaky.npy"
	[ "$status" -eq 0 ]
	[ "$output" = $'[[0. 1. 2.]\n [3. 4. 5.]]' ]
	[ "$(grep -c '^/flaky.npy$' "$WWW/hits")" -eq 2 ]
}

@test "http 500 twice: exit 3 naming status 500 after one retry" {
	run --separate-stderr $CT info "$URL/broken.npy"
	[ "$status" -eq 3 ]
	[[ "$stderr" == *"HTTP status 500" ]]
	[ "$(grep -c '^/broken.npy$' "$WWW/hits")" -eq 2 ]
}

@test "a server that never answers times out after COLLX_TIMEOUT" {
	start=$SECONDS
	COLLX_TIMEOUT=1 run --separate-stderr $CT info "$URL/hang.npy"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "collx-tensor: $URL/hang.npy: timed out"* ]]
	[ $((SECONDS - start)) -lt 20 ]
}

@test "connection refused: exit 3 with a message" {
	port=$(free_port)
	run --separate-stderr $CT info "http://127.0.0.1:$port/x.npy"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "collx-tensor: http://127.0.0.1:$port/x.npy: "* ]]
	[ "$(printf '%s\n' "$stderr" | wc -l)" -eq 1 ]
}

@test "file:// URLs, present and missing" {
	run $CT print "file://$FIXTURES/arange_i4_be.npy"
	[ "$status" -eq 0 ]
	[ "$output" = '[-3 -2 -1  0  1  2]' ]
	run --separate-stderr $CT info "file://$T/missing.npy"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "collx-tensor: file://$T/missing.npy: "* ]]
}

@test "malformed data over http is bad input too" {
	printf 'garbage, not a tensor' > "$WWW/garbage.npy"
	run --separate-stderr $CT info "$URL/garbage.npy"
	[ "$status" -eq 3 ]
	[[ "$stderr" == "collx-tensor: $URL/garbage.npy: not a .npy or .safetensors"* ]]
}
