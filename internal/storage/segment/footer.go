package segment

import (
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"os"

	"github.com/malachi-log/malachi/internal/vfs"
)

// Footer describes a sealed segment. It is written once, at seal, to the
// .seal sidecar; the control plane records the same values, and scrubbing
// and healing compare replicas against them.
type Footer struct {
	Base, End, Records uint64
	Bytes              int64  // batch bytes in the .log (after its file header)
	ContentHash        uint64 // xxhash64 of those bytes
	MaxExpiry          int64  // 0 when some record never expires
	MaxTimestamp       int64
	Generation         uint32
}

// Seal file (.seal) layout, little-endian, 80 bytes:
//
//	 0  4  magic "MSEL"          40  8  bytes
//	 4  2  version (1)           48  8  content hash
//	 6  2  reserved (0)          56  8  max expiry
//	 8  8  segment id            64  8  max timestamp
//	16  8  base                  72  4  generation
//	24  8  end                   76  4  CRC32C of bytes 0..75
//	32  8  records
const (
	sealMagic   = "MSEL"
	sealVersion = 1
	sealSize    = 80
)

// MarshalFooter encodes f for the segment id.
func MarshalFooter(id uint64, f Footer) []byte {
	le := binary.LittleEndian
	b := make([]byte, 0, sealSize)
	b = append(b, sealMagic...)
	b = le.AppendUint16(b, sealVersion)
	b = le.AppendUint16(b, 0)
	for _, v := range []uint64{id, f.Base, f.End, f.Records, uint64(f.Bytes), f.ContentHash,
		uint64(f.MaxExpiry), uint64(f.MaxTimestamp)} {
		b = le.AppendUint64(b, v)
	}
	b = le.AppendUint32(b, f.Generation)
	return le.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

// UnmarshalFooter decodes a .seal file's bytes.
func UnmarshalFooter(b []byte) (id uint64, f Footer, err error) {
	le := binary.LittleEndian
	if len(b) != sealSize || string(b[:4]) != sealMagic || le.Uint16(b[4:]) != sealVersion {
		return 0, f, corruptf("seal file: bad size, magic or version")
	}
	if crc32.Checksum(b[:sealSize-4], castagnoli) != le.Uint32(b[sealSize-4:]) {
		return 0, f, corruptf("seal file: crc mismatch")
	}
	u := func(i int) uint64 { return le.Uint64(b[8+8*i:]) }
	f = Footer{Base: u(1), End: u(2), Records: u(3), Bytes: int64(u(4)), ContentHash: u(5),
		MaxExpiry: int64(u(6)), MaxTimestamp: int64(u(7)), Generation: le.Uint32(b[72:])}
	if f.End < f.Base || f.Bytes < 0 || f.MaxExpiry < 0 {
		return 0, f, corruptf("seal file: inconsistent fields")
	}
	return u(0), f, nil
}

// WriteFooter writes the .seal file at path atomically (temporary file,
// fsync, rename). The caller must SyncDir the directory to make it durable.
func WriteFooter(fs vfs.FS, path string, id uint64, f Footer) error {
	return WriteFileAtomic(fs, path, MarshalFooter(id, f))
}

// ReadFooter reads and checks the .seal file at path.
func ReadFooter(fs vfs.FS, path string) (id uint64, f Footer, err error) {
	b, err := readSmallFile(fs, path, sealSize)
	if err != nil {
		return 0, f, err
	}
	return UnmarshalFooter(b)
}

// TempSuffix ends the names of files being written atomically; a crash can
// leave them behind, and they are safe to remove.
const TempSuffix = vfs.TempSuffix

// WriteFileAtomic is vfs.WriteFileAtomic, for the packages that write
// beside segments.
func WriteFileAtomic(fs vfs.FS, path string, data []byte) error {
	return vfs.WriteFileAtomic(fs, path, data)
}

// readSmallFile reads a whole file of at most limit bytes.
func readSmallFile(fs vfs.FS, path string, limit int64) ([]byte, error) {
	f, err := fs.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	size, err := f.Size()
	if err != nil {
		return nil, err
	}
	if size > limit {
		return nil, fmt.Errorf("%w: %s is %d bytes, expected at most %d", ErrCorrupt, path, size, limit)
	}
	b := make([]byte, size)
	if n, err := f.ReadAt(b, 0); n != len(b) {
		return nil, fmt.Errorf("read %s: %d of %d bytes: %w", path, n, size, err)
	}
	return b, nil
}
