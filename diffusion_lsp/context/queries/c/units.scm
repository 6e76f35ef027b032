(translation_unit (_) @unit)
