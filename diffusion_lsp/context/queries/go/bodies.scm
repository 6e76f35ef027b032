(block) @body
(field_declaration_list) @body
