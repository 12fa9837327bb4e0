package vfs

// newFilesSyncer wraps the inner filesystem's syncer: a batch consults
// OpSyncFiles with the directory, then OpSync with each file's name, so
// a rule that fails a file's sync fails the batch holding it too.
func (f *FaultyFS) newFilesSyncer(dir string, minFiles int) (FilesSyncer, error) {
	if err := f.check(OpOpen, dir); err != nil {
		return nil, err
	}
	inner, err := NewFilesSyncer(f.inner, dir, minFiles)
	if err != nil {
		return nil, err
	}
	return &faultySyncer{fs: f, dir: dir, inner: inner}, nil
}

type faultySyncer struct {
	fs    *FaultyFS
	dir   string
	inner FilesSyncer
}

func (s *faultySyncer) SyncFiles(files []File) (int, error) {
	if err := s.fs.check(OpSyncFiles, s.dir); err != nil {
		return 0, err
	}
	inner := make([]File, len(files))
	for i, file := range files {
		inner[i] = file
		if ff, ok := file.(*faultyFile); ok {
			if err := s.fs.check(OpSync, ff.name); err != nil {
				return 0, err
			}
			inner[i] = ff.f
		}
	}
	return s.inner.SyncFiles(inner)
}

func (s *faultySyncer) Close() error { return s.inner.Close() }
