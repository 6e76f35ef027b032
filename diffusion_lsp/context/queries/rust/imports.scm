(use_declaration argument: (_) @module)
(mod_item name: (identifier) @module)
(extern_crate_declaration name: (identifier) @module)
