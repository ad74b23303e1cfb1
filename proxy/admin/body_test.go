package admin

import (
	"net/http/httptest"
	"runtime"
	"strings"
	"testing"
)

// Reading an admin request's body costs what was sent, not what was announced: a request that
// announces MaxBodyBytes and sends two bytes allocates a small buffer, not 10 MiB (100 such
// connections held 1 GiB). Not parallel: it measures allocations.
func TestReadBodyCostsWhatWasSent(t *testing.T) {
	r := httptest.NewRequest("POST", "/admin/prompts/preview", strings.NewReader("{}"))
	r.ContentLength = MaxBodyBytes
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	body, err := readBody(httptest.NewRecorder(), r)
	runtime.ReadMemStats(&after)
	if err != nil || string(body) != "{}" {
		t.Fatalf("%q, %v", body, err)
	}
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 64<<10 {
		t.Fatalf("reading a 2-byte body that announced %d bytes allocated %d KiB", MaxBodyBytes, grown>>10)
	}
	big := strings.Repeat("x", 3<<20)
	r = httptest.NewRequest("POST", "/admin/prompts/preview", strings.NewReader(big))
	r.ContentLength = -1
	if body, err := readBody(httptest.NewRecorder(), r); err != nil || string(body) != big {
		t.Fatalf("a 3 MiB body of unknown length: %d bytes, %v", len(body), err)
	}
	r = httptest.NewRequest("POST", "/admin/prompts/preview", strings.NewReader(big+big+big+big))
	r.ContentLength = -1
	if _, err := readBody(httptest.NewRecorder(), r); err == nil {
		t.Fatal("a body over MaxBodyBytes was read")
	}
}
