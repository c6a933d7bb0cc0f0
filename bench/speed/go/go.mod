// The bench's own load generator and receiver (bench/speed/benthos.py builds them
// into its cache folder). The standard library only: nothing to download.
module triostomp.bench/go

go 1.22
