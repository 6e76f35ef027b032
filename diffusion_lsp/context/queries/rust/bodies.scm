(block) @body
(declaration_list) @body
(field_declaration_list) @body
(enum_variant_list) @body
(match_block) @body
