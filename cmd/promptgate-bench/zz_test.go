package main
import ("testing";"io";"github.com/promptgate/promptgate/proxy/surface/chat")
func BenchmarkZZTool(b *testing.B){
	f := newStageFixture(b)
	for _, tool := range []bool{false,true} {
	evs := streamEvents(12, tool)
	mk := cachedChecker(b, f.prep)
	buf := make([]byte, 32<<10)
	b.Run(map[bool]string{false:"text",true:"tool"}[tool], func(b *testing.B) {
	b.ReportAllocs()
	for b.Loop() {
	st := chat.NewStream(io.NopCloser(&eventReader{evs: append([][]byte(nil), evs...)}), mk(), nil)
	io.CopyBuffer(io.Discard, st, buf)
	}})
	}
}
