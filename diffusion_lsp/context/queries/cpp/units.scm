(translation_unit (_) @unit)
(declaration_list (_) @unit)
(field_declaration_list (_) @unit)
