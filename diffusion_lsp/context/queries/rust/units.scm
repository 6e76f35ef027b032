(source_file (_) @unit)
(declaration_list (_) @unit)
