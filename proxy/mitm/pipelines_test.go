package mitm

import (
	"net/http"
	"path/filepath"
	"strconv"
	"testing"

	"github.com/promptgate/promptgate/proxy/origin"
)

// TestPipelinesBounded: 3,000 client-chosen names (1,500 ports, each in two spellings) leave at
// most DefaultMaxPipelines pipelines, and one per normalised origin is built.
func TestPipelinesBounded(t *testing.T) {
	t.Parallel()
	certPath, keyPath, err := WriteCA(filepath.Join(t.TempDir(), "ca"), false)
	if err != nil {
		t.Fatal(err)
	}
	ca, err := LoadCA(certPath, keyPath)
	if err != nil {
		t.Fatal(err)
	}
	built := 0
	d, err := New(Options{CA: ca, Hosts: []string{"api.openai.test"}, Handler: func(origin.Origin) (http.Handler, error) {
		built++
		return http.NotFoundHandler(), nil
	}})
	if err != nil {
		t.Fatal(err)
	}
	for port := 1000; port < 2500; port++ {
		for _, host := range []string{"api.openai.test", "API.OpenAI.TEST."} {
			o, err := origin.New("https", host+":"+strconv.Itoa(port))
			if err != nil {
				t.Fatal(err)
			}
			if _, err := d.pipeline(o); err != nil {
				t.Fatal(err)
			}
		}
	}
	if n := d.pipelines.Len(); n > DefaultMaxPipelines {
		t.Errorf("%d pipelines kept, want at most %d", n, DefaultMaxPipelines)
	}
	if built != 1500 {
		t.Errorf("%d pipelines built for 1,500 origins", built)
	}
}
