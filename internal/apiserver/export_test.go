package apiserver

// SetParallelGzipItems sets parallelGzipItems until the returned function
// puts it back.
func SetParallelGzipItems(n int) (restore func()) {
	old := parallelGzipItems
	parallelGzipItems = n
	return func() { parallelGzipItems = old }
}
