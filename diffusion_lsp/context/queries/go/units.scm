(source_file (_) @unit)
