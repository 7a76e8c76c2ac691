"""The recording store: `store.Recorder` writes a run into SQLite as events arrive,
`reader.Recording` reads it back, `export.to_json` turns it into the JSON report."""
