package maasapi

import (
	"encoding/base64"
	"io"
	"net/http"
	"net/url"

	"rackd/store"
)

// files/: MAAS's file storage, where Juju keeps its provider state: the
// store's user files. A file belongs to the user whose key stored it; a
// name always means the caller's own file, so another user's key neither
// lists, reads nor deletes it (it gets 404, as from MAAS). MAAS also serves
// a file anonymously by its key (op=get_by_key); rackd asks for the owner's
// key there too: only version/ and describe/ answer anonymously.

// fileBodyLimit bounds an upload: the largest file and room for the
// multipart framing and the other parameters.
const fileBodyLimit = store.MaxUserFileSize + 64<<10

type fileJSON struct {
	Filename        string `json:"filename"`
	AnonResourceURI string `json:"anon_resource_uri"`
	Content         string `json:"content,omitempty"`
	ResourceURI     string `json:"resource_uri"`
}

func fileView(f store.UserFile) fileJSON {
	return fileJSON{Filename: f.Name, ResourceURI: uri("files", f.Name),
		AnonResourceURI: Prefix + "files/?" + url.Values{"op": {"get_by_key"}, "key": {f.Key}}.Encode()}
}

// filesRead lists the caller's files whose names start with prefix, by
// name, without their content.
func filesRead(s *Server, c *call) (any, error) {
	prefix := c.str("prefix")
	if err := c.check(); err != nil {
		return nil, err
	}
	fs, err := s.store.UserFiles(c.who, prefix)
	if err != nil {
		return nil, err
	}
	out := make([]fileJSON, len(fs))
	for i, f := range fs {
		out[i] = fileView(f)
	}
	return out, nil
}

// fileNotFound is MAAS's answer for a file the caller does not have.
func fileNotFound(err error) error {
	if store.CodeOf(err) == store.CodeNotFound {
		return errorf(http.StatusNotFound, "File not found: %v", err)
	}
	return err
}

// filesGet is op=get: the content of the caller's file filename, as it is.
func filesGet(s *Server, c *call) (any, error) {
	name := c.str("filename")
	if name == "" {
		c.fail("filename", "This field is required.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	_, content, err := s.store.ReadUserFile(c.who, name)
	if err != nil {
		return nil, fileNotFound(err)
	}
	return raw{contentType: "application/octet-stream", body: content}, nil
}

// filesGetByKey is op=get_by_key: the content of the caller's file with
// that key.
func filesGetByKey(s *Server, c *call) (any, error) {
	key := c.str("key")
	if key == "" {
		c.fail("key", "This field is required.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	_, content, err := s.store.ReadUserFileByKey(c.who, key)
	if err != nil {
		return nil, fileNotFound(err)
	}
	return raw{contentType: "application/octet-stream", body: content}, nil
}

// filesAdd stores the one file part "file" as the caller's file filename,
// replacing the one of that name.
func filesAdd(s *Server, c *call) (any, error) {
	name := c.str("filename")
	if name == "" {
		return nil, errorf(http.StatusBadRequest, "Filename not supplied")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	n := 0
	for _, fs := range c.files {
		n += len(fs)
	}
	if n == 0 {
		return nil, errorf(http.StatusBadRequest, "File not supplied")
	}
	if n != 1 || len(c.files["file"]) != 1 {
		return nil, errorf(http.StatusBadRequest, "Exactly one file must be supplied, as the part named \"file\"")
	}
	fh := c.files["file"][0]
	if fh.Size > store.MaxUserFileSize {
		return nil, errorf(http.StatusRequestEntityTooLarge, "the file is %d bytes: at most %d", fh.Size, store.MaxUserFileSize)
	}
	r, err := fh.Open()
	if err != nil {
		return nil, err
	}
	defer r.Close()
	content, err := io.ReadAll(io.LimitReader(r, store.MaxUserFileSize+1))
	if err != nil {
		return nil, err
	}
	f, err := s.store.PutUserFile(c.ctx(), c.who, name, content)
	if err != nil {
		return nil, err
	}
	s.log.Info("file stored through the MAAS API", "file", f.Name, "bytes", f.Size, "by", c.who.Name)
	return fileView(f), nil
}

// filesDelete is MAAS's DELETE files/?filename=NAME.
func filesDelete(s *Server, c *call) (any, error) {
	name := c.str("filename")
	if name == "" {
		c.fail("filename", "This field is required.")
	}
	if err := c.check(); err != nil {
		return nil, err
	}
	return deleteFile(s, c, name)
}

func deleteFile(s *Server, c *call, name string) (any, error) {
	f, err := s.store.DeleteUserFile(c.ctx(), c.who, name)
	if err != nil {
		return nil, fileNotFound(err)
	}
	s.log.Info("file deleted through the MAAS API", "file", f.Name, "by", c.who.Name)
	return emptyAnswer, nil
}

// fileRead is GET files/{filename}/: the file with its content in base64.
func fileRead(s *Server, c *call) (any, error) {
	f, content, err := s.store.ReadUserFile(c.who, c.path("filename"))
	if err != nil {
		return nil, fileNotFound(err)
	}
	v := fileView(f)
	v.Content = base64.StdEncoding.EncodeToString(content)
	return v, nil
}

func fileDelete(s *Server, c *call) (any, error) { return deleteFile(s, c, c.path("filename")) }
